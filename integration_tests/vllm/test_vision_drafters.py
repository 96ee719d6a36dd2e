"""Vision-aware drafters inside vLLM on the smollm2-llava stand-in (image + question requests):
greedy output equals vLLM without speculation (fp32), the drafters really received the images and
drafted from a shorter context, and text-only drafters warn or, strictly configured, refuse."""

import pytest
import torch
from vllm_lane import counters_during, engine, shape_stats

MAX_TOKENS = 32
IMAGE_ROWS = 64  # the stand-in: 64x64 pixels, 8x8 patches
LLM_ARGS = {"limit_mm_per_prompt": {"image": 1}, "max_model_len": 1024}


def greedy_image_outputs(llm, requests):
    from vllm import SamplingParams

    outs = llm.generate(requests, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def plain_outputs(stand_in_folder, image_requests):
    with engine(stand_in_folder, spec=None, max_num_seqs=4, **LLM_ARGS) as llm:
        return greedy_image_outputs(llm, image_requests)


@pytest.mark.parametrize(
    "drafter, options, kept",
    [
        ("vispec", {}, 1),
        ("vision-prune", {"keep_ratio": 0.25}, 16),
        ("dream", {"prune_by": "embedding"}, 32),
    ],
)
def test_vision_drafter_equals_plain_vllm(stand_in_folder, image_requests, plain_outputs, drafter, options, kept):
    spec = {"method": "sage", "drafter": drafter, "drafter_options": options, "num_speculative_tokens": 8}
    with engine(stand_in_folder, spec=spec, max_num_seqs=4, **LLM_ARGS) as llm:
        outputs, counts = counters_during(llm, lambda: greedy_image_outputs(llm, image_requests))
        stats = shape_stats()
    assert outputs == plain_outputs
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
    assert stats.with_images == stats.proposals > 0  # every proposal saw its request's image
    # one entry per request: its draft KV holds `kept` of the image's rows
    assert stats.rows_dropped == [IMAGE_ROWS - kept] * len(image_requests)


def test_text_only_drafter_warns_and_stays_exact(stand_in_folder, image_requests, plain_outputs, caplog):
    spec = {"method": "sage", "drafter": "eagle", "num_speculative_tokens": 8}
    with (
        caplog.at_level("WARNING", logger="vllm.sagespec"),
        engine(stand_in_folder, spec=spec, max_num_seqs=4, **LLM_ARGS) as llm,
    ):
        outputs = greedy_image_outputs(llm, image_requests)
        assert shape_stats().with_images == 0
    assert outputs == plain_outputs
    assert any("drafter 'eagle' cannot see images" in r.getMessage() for r in caplog.records)


def test_strict_multimodal_refuses_a_text_only_drafter(stand_in_folder):
    spec = {"method": "sage", "drafter": "ngram", "strict_multimodal": True}
    with (
        pytest.raises(Exception, match=r"cannot see images.*strict_multimodal refuses it"),
        engine(stand_in_folder, spec=spec, **LLM_ARGS),
    ):
        pass


def test_dream_prunes_by_the_targets_attention_read_in_vllms_prefill(
    stand_in_folder, image_requests, plain_outputs, monkeypatch
):
    """DREAM's default (attention pruning): the saliency read inside vLLM's prefill equals
    transformers' eager attention of the prompt's last position at the middle layer (fp32)."""
    from sagespec.common.drafters import VisionDrafter

    seen = []
    propose = VisionDrafter.propose

    def recording_propose(self, ctx, *args):
        if self.head.cache_length == 0 and ctx.images is not None:
            seen.append((ctx.tokens.clone(), ctx.images))
        return propose(self, ctx, *args)

    monkeypatch.setattr(VisionDrafter, "propose", recording_propose)
    spec = {"method": "sage", "drafter": "dream", "num_speculative_tokens": 8}
    with engine(stand_in_folder, spec=spec, max_num_seqs=4, **LLM_ARGS) as llm:
        outputs = greedy_image_outputs(llm, image_requests)
        stats = shape_stats()
    assert outputs == plain_outputs
    assert stats.rows_dropped == [IMAGE_ROWS // 2] * len(image_requests)
    assert len(seen) == len(image_requests) and all(images.saliency is not None for _, images in seen)
    expected = transformers_saliency(stand_in_folder, image_requests[0])
    (images,) = [im for t, im in seen if t[:-1].tolist() == expected["prompt_ids"]]  # tokens[-1] is the root
    torch.testing.assert_close(images.saliency, expected["saliency"], rtol=1e-3, atol=1e-5)


def transformers_saliency(folder, request):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    model.set_attn_implementation("eager")
    inputs = processor(images=[request["multi_modal_data"]["image"]], text=request["prompt"], return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    ids = inputs["input_ids"][0]
    image = torch.nonzero(ids == model.config.image_token_index).flatten()
    middle = model.config.get_text_config().num_hidden_layers // 2
    return {"prompt_ids": ids.tolist(), "saliency": out.attentions[middle][0, :, -1].mean(0)[image]}
