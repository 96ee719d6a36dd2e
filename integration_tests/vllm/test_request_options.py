"""Requests with options only vLLM's sampler applies are never wrong: greedy ones get chains that
vLLM verifies (same output as plain vLLM), sampling ones run without speculation."""

from vllm_lane import counters_during, engine

SPEC = {
    "method": "sage",
    "drafter": "ngram",
    "policy": "sage",
    "num_speculative_tokens": 8,
    "drafter_options": {"min_ngram": 1},
}


def run(llm, prompts, params):
    from vllm import TokensPrompt

    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [(list(o.outputs[0].token_ids), o.outputs[0].logprobs) for o in outs]


def test_grammar_and_logprobs_greedy_equal_plain(smollm2_folder, mtbench_prompts):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    prompts = mtbench_prompts[:4]
    grammar = SamplingParams(
        temperature=0.0, max_tokens=48, structured_outputs=StructuredOutputsParams(regex=r"(Sure|No)[a-z ,.]{10,60}")
    )
    logprobs = SamplingParams(temperature=0.0, max_tokens=48, logprobs=2)
    with engine(smollm2_folder, spec=None) as llm:
        plain = run(llm, prompts, grammar), run(llm, prompts, logprobs)
    with engine(smollm2_folder, spec=SPEC) as llm:
        sage, counts = counters_during(llm, lambda: (run(llm, prompts, grammar), run(llm, prompts, logprobs)))
    assert [t for t, _ in sage[0]] == [t for t, _ in plain[0]]
    assert [t for t, _ in sage[1]] == [t for t, _ in plain[1]]
    # The requests were drafted for (as chains vLLM verifies), and some drafts were accepted.
    assert counts["vllm:spec_decode_num_draft_tokens"] > 0
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
    # Each position's logprobs: the same tokens, the same values (fp32; a verify forward computes a
    # row as a plain decode does, up to summation order).
    for (tokens, got), (_, want) in zip(sage[1], plain[1]):
        assert got is not None and len(got) == len(want) == len(tokens)
        for position, (row, expected) in enumerate(zip(got, want)):
            assert row.keys() == expected.keys(), f"position {position}: tokens {row.keys()} != {expected.keys()}"
            for token, logprob in row.items():
                assert abs(logprob.logprob - expected[token].logprob) < 2e-3, f"position {position}, token {token}"


def test_sampling_with_penalties_runs_without_drafts(smollm2_folder, mtbench_prompts):
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.8, max_tokens=32, repetition_penalty=1.2)
    with engine(smollm2_folder, spec=SPEC) as llm:
        outputs, counts = counters_during(llm, lambda: run(llm, mtbench_prompts[:4], params))
    assert all(t for t, _ in outputs)
    assert counts["vllm:spec_decode_num_drafts"] == 0
