"""Attention features beyond plain causal attention in vLLM: sliding windows (Gemma 3) and
soft-capped scores with windows (Gemma 2) give greedy output identical to plain vLLM with SAGE
trees (fp32, contexts longer than the window); a model whose attention trees cannot reproduce
(ALiBi, attention sinks) is refused when the engine starts, and its chains still run exactly."""

import pytest
from vllm_lane import counters_during, engine

WINDOW = 8
PROMPTS = [[1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3, 4, 5, 7, 9, 5, 7, 9, 2, 6], [3, 3, 4, 5, 6, 7, 3] * 3, [7, 6, 5]]
KWARGS = dict(max_num_seqs=4, skip_tokenizer_init=True, max_model_len=512)


def greedy(llm, prompts, max_tokens=40):
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def save(model, tmp_path_factory, name):
    folder = tmp_path_factory.mktemp(name)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=["gemma3", "gemma2-softcap"])
def windowed_folder(request, tmp_path_factory):
    from tiny_models import tiny_gemma2, tiny_gemma3

    make = tiny_gemma3 if request.param == "gemma3" else tiny_gemma2
    return save(make(sliding_window=WINDOW), tmp_path_factory, request.param)


@pytest.mark.parametrize("drafter", ["ngram", "draft_model"])
def test_sliding_window_trees_equal_plain(windowed_folder, drafter):
    with engine(windowed_folder, spec=None, **KWARGS) as llm:
        plain = greedy(llm, PROMPTS)
    spec = {
        "method": "sage",
        "drafter": drafter,
        "policy": "dynamic",
        "policy_options": {"depth": 3, "width": 2},
        "num_speculative_tokens": 6,
    }
    if drafter == "draft_model":
        spec["model"] = str(windowed_folder)  # the model drafting for itself: its tree holds its own line
    with engine(windowed_folder, spec=spec, **KWARGS) as llm:
        outputs, counts = counters_during(llm, lambda: greedy(llm, PROMPTS))
    assert outputs == plain
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0


REFUSED = {
    "alibi": ("tiny_bloom", "ALiBi position biases"),
    "sinks": ("tiny_gpt_oss", "layers.0.attn.attn uses attention sinks"),
}


@pytest.mark.parametrize("feature", sorted(REFUSED))
def test_trees_refused_at_startup_naming_the_feature(tmp_path_factory, feature):
    import tiny_models

    make, message = REFUSED[feature]
    folder = save(getattr(tiny_models, make)(vocab_size=16), tmp_path_factory, feature)
    trees = {"method": "sage", "drafter": "ngram", "policy": "sage", "num_speculative_tokens": 6}
    with pytest.raises(Exception, match=message + '.*"policy": "chain"'), engine(folder, spec=trees, **KWARGS):
        pass


def test_alibi_chains_equal_plain(tmp_path_factory):
    from tiny_models import tiny_bloom

    folder = save(tiny_bloom(vocab_size=16), tmp_path_factory, "bloom-chains")
    with engine(folder, spec=None, **KWARGS) as llm:
        plain = greedy(llm, PROMPTS)
    chains = {"method": "sage", "drafter": "ngram", "policy": "chain", "num_speculative_tokens": 4}
    with engine(folder, spec=chains, **KWARGS) as llm:
        assert greedy(llm, PROMPTS) == plain


def test_gemma3_270m_trees_equal_plain_past_the_window():
    """The real Gemma 3 270M (fp32): a prompt longer than its 512-token window, and a short one."""
    from transformers import AutoTokenizer

    from sagespec.common.datasets import load_prompts
    from sagespec.plugins.transformers.model_loading import gemma3_folder

    folder = gemma3_folder()
    tok = AutoTokenizer.from_pretrained(folder)
    texts = [p.text for p in load_prompts("mt-bench", 20)]
    prompts = [tok("\n\n".join(texts))["input_ids"], tok(texts[0])["input_ids"]]
    assert len(prompts[0]) > 600
    kwargs = dict(max_num_seqs=2, max_model_len=2048)
    with engine(folder, spec=None, **kwargs) as llm:
        plain = greedy(llm, prompts, max_tokens=32)
    spec = {"method": "sage", "drafter": "ngram", "policy": "sage", "num_speculative_tokens": 8}
    with engine(folder, spec=spec, **kwargs) as llm:
        outputs, counts = counters_during(llm, lambda: greedy(llm, prompts, max_tokens=32))
    assert outputs == plain
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
