"""A model used as its own draft model: every drafted token of a greedy chain is accepted."""

from vllm_lane import counters_during, engine


def greedy(llm, prompts, max_tokens=24):
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


PROMPTS = [[1, 2, 3, 4, 5, 6], [3, 3, 4, 5, 6, 7, 3], [7, 6, 5]]


def test_self_draft_accepts_everything(tiny_folder):
    kwargs = dict(max_num_seqs=4, skip_tokenizer_init=True, max_model_len=512)
    with engine(tiny_folder, spec=None, **kwargs) as llm:
        plain = greedy(llm, PROMPTS)
    spec = {
        "method": "sage",
        "drafter": "draft_model",
        "model": str(tiny_folder),
        "policy": "chain",
        "num_speculative_tokens": 4,
    }
    with engine(tiny_folder, spec=spec, **kwargs) as llm:
        outputs, counts = counters_during(llm, lambda: greedy(llm, PROMPTS))
    assert outputs == plain
    assert counts["vllm:spec_decode_num_draft_tokens"] > 0
    assert counts["vllm:spec_decode_num_accepted_tokens"] == counts["vllm:spec_decode_num_draft_tokens"]


def test_draft_model_trees_equal_plain(tiny_folder):
    kwargs = dict(max_num_seqs=4, skip_tokenizer_init=True, max_model_len=512)
    with engine(tiny_folder, spec=None, **kwargs) as llm:
        plain = greedy(llm, PROMPTS)
    spec = {
        "method": "sage",
        "drafter": "draft_model",
        "model": str(tiny_folder),
        "policy": "dynamic",
        "policy_options": {"depth": 3, "width": 2},
        "num_speculative_tokens": 6,
    }
    with engine(tiny_folder, spec=spec, **kwargs) as llm:
        outputs, counts = counters_during(llm, lambda: greedy(llm, PROMPTS))
    assert outputs == plain
    # A tree holds branches the greedy path cannot take: fewer accepted than drafted, more than none.
    assert 0 < counts["vllm:spec_decode_num_accepted_tokens"] < counts["vllm:spec_decode_num_draft_tokens"]
