"""At temperature 1, method 'sage' samples from the target's distribution (chi-square against the
exact joint distribution of the first three tokens, computed with transformers)."""

import pytest
import torch
from distribution_stats import chi_square_pvalue, exact_joint, greedy_continuation
from vllm_lane import counters_during, engine

V = 8  # the tiny model's vocabulary
N = 4000


def sample_counts(llm, prompt):
    from vllm import SamplingParams, TokensPrompt

    # No per-request seeds: on vLLM's CPU build, seeded requests whose prefill is chunked crash
    # ("CPU Generator does not use offset"). Draws come from the engine's seeded generator.
    params = SamplingParams(temperature=1.0, max_tokens=3, detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=prompt)] * N, params, use_tqdm=False)
    counts = torch.zeros(V, V, V, dtype=torch.float64)
    for o in outs:
        a, b, c = o.outputs[0].token_ids
        counts[a, b, c] += 1
    return counts


@pytest.fixture(scope="module")
def setting(tiny_folder):
    seed = [1, 2, 3, 4, 5, 6]
    # The prompt repeats its opening after the model's own continuation of it, so prompt lookup
    # proposes likely tokens: drafts get both accepted and rejected.
    prompt = seed + greedy_continuation(tiny_folder, seed, 8) + seed
    return prompt, exact_joint(tiny_folder, prompt, 1.0), exact_joint(tiny_folder, prompt, 0.7)


def test_sampling_matches_the_target_distribution(tiny_folder, setting):
    prompt, exact, colder = setting
    kwargs = dict(max_num_seqs=256, skip_tokenizer_init=True, max_model_len=512)
    spec = {"method": "sage", "drafter": "ngram", "num_speculative_tokens": 4, "drafter_options": {"min_ngram": 1}}
    with engine(tiny_folder, spec=spec, **kwargs) as llm:
        sage, counts = counters_during(llm, lambda: sample_counts(llm, prompt))
    with engine(tiny_folder, spec=None, **kwargs) as llm:
        plain = sample_counts(llm, prompt)
    drafted, accepted = counts["vllm:spec_decode_num_draft_tokens"], counts["vllm:spec_decode_num_accepted_tokens"]
    assert 0 < accepted < drafted, f"need both accepted and rejected drafts; got {accepted}/{drafted}"
    p_plain, p_sage = (chi_square_pvalue(c.flatten(), exact.flatten()) for c in (plain, sage))
    assert p_plain > 1e-3, f"plain vLLM vs the exact distribution: p={p_plain}"  # the oracle is right
    assert p_sage > 1e-3, f"sage vs the exact distribution: p={p_sage}"
    # The test has power: the same samples are far from the temperature-0.7 distribution.
    assert chi_square_pvalue(sage.flatten(), colder.flatten()) < 1e-3
