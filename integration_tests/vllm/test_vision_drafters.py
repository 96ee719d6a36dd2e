"""Vision-aware drafters inside vLLM on the smollm2-llava stand-in (image + question requests):
greedy output equals vLLM without speculation (fp32), the drafters really received the images and
drafted from a shorter context, and text-only drafters warn or, strictly configured, refuse."""
import pytest

from vllm_lane import counters_during, engine, shape_stats

MAX_TOKENS = 32
IMAGE_ROWS = 64   # the stand-in: 64x64 pixels, 8x8 patches
LLM_ARGS = {"limit_mm_per_prompt": {"image": 1}, "max_model_len": 1024}


def greedy_image_outputs(llm, requests):
    from vllm import SamplingParams
    outs = llm.generate(requests, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def plain_outputs(stand_in_folder, image_requests):
    with engine(stand_in_folder, spec=None, max_num_seqs=4, **LLM_ARGS) as llm:
        return greedy_image_outputs(llm, image_requests)


@pytest.mark.parametrize("drafter, options, kept", [
    ("vispec", {}, 1),
    ("vision-prune", {"keep_ratio": 0.25}, 16),
    ("dream", {"prune_by": "embedding"}, 32),
])
def test_vision_drafter_equals_plain_vllm(stand_in_folder, image_requests, plain_outputs, drafter, options, kept):
    spec = {"method": "sage", "drafter": drafter, "drafter_options": options, "num_speculative_tokens": 8}
    with engine(stand_in_folder, spec=spec, max_num_seqs=4, **LLM_ARGS) as llm:
        outputs, counts = counters_during(llm, lambda: greedy_image_outputs(llm, image_requests))
        stats = shape_stats()
    assert outputs == plain_outputs
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
    assert stats.with_images == stats.proposals > 0          # every proposal saw its request's image
    # one entry per request: its draft KV holds `kept` of the image's rows
    assert stats.rows_dropped == [IMAGE_ROWS - kept] * len(image_requests)


def test_text_only_drafter_warns_and_stays_exact(stand_in_folder, image_requests, plain_outputs, caplog):
    spec = {"method": "sage", "drafter": "eagle", "num_speculative_tokens": 8}
    with caplog.at_level("WARNING", logger="vllm.sagespec"):
        with engine(stand_in_folder, spec=spec, max_num_seqs=4, **LLM_ARGS) as llm:
            outputs = greedy_image_outputs(llm, image_requests)
            assert shape_stats().with_images == 0
    assert outputs == plain_outputs
    assert any("drafter 'eagle' cannot see images" in r.getMessage() for r in caplog.records)


def test_strict_multimodal_refuses_a_text_only_drafter(stand_in_folder):
    spec = {"method": "sage", "drafter": "ngram", "strict_multimodal": True}
    with pytest.raises(Exception, match="cannot see images.*strict_multimodal refuses it"):
        with engine(stand_in_folder, spec=spec, **LLM_ARGS):
            pass


def test_attention_pruning_is_refused_with_the_fix(stand_in_folder):
    with pytest.raises(Exception, match="prune_by 'attention'.*\"prune_by\": \"embedding\""):
        with engine(stand_in_folder, spec={"method": "sage", "drafter": "dream"}, **LLM_ARGS):
            pass
