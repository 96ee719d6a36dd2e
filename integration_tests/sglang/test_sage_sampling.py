"""At temperature 1, sage inside SGLang's CPU engine samples from the target's distribution:
chi-square of the first three tokens against the exact joint distribution (transformers, fp64),
for sage and for SGLang without speculation (which checks the oracle). Token 1 comes from SGLang's
own sampler at prefill; tokens 2 and 3 from the worker's exact tree rejection sampling."""

import json

import pytest
import torch
from distribution_stats import chi_square_pvalue, exact_joint, greedy_continuation
from test_sage_engine import engine_runs

N = 3000


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """Vocabulary 8 with peaked distributions: 512 outcomes, each seen often enough."""
    from tiny_models import tiny_llama

    folder = tmp_path_factory.mktemp("tiny-llama-v8")
    tiny_llama(vocab_size=8, init_std=0.5, seed=3).save_pretrained(folder)
    return str(folder)


def counts_of(run: dict, vocab: int) -> torch.Tensor:
    counts = torch.zeros(vocab, vocab, vocab, dtype=torch.float64)
    for a, b, c in run["tokens"]:
        counts[a, b, c] += 1
    return counts


def test_sampling_matches_the_target_distribution(tiny_folder):
    seed = [1, 2, 3, 4, 5, 6]
    # The prompt repeats its opening after the model's own continuation of it, so prompt lookup
    # proposes likely tokens: drafts get both accepted and rejected.
    prompt = seed + greedy_continuation(tiny_folder, seed, 8) + seed
    results = engine_runs(
        {
            "model": tiny_folder,
            "prompts": [prompt] * N,
            "max_new_tokens": 3,
            "sampling": {"temperature": 1.0, "ignore_eos": True},
            "configs": {
                "plain": {"max_running_requests": 256},
                "sage": {
                    "max_running_requests": 256,
                    "speculative_algorithm": "sage",
                    "speculative_num_draft_tokens": 5,
                    "speculative_adaptive_config": json.dumps({"drafter_options": {"min_ngram": 1}}),
                },
            },
        }
    )
    meta = results["sage"]["meta"]
    accepted = sum(m["spec_num_correct_drafts"] for m in meta)
    verifies = sum(m["spec_verify_ct"] for m in meta)
    # Drafts accepted, and some requests needed a second verify (their first one accepted nothing).
    assert accepted > 0 and verifies > len(meta), f"{accepted} drafts accepted in {verifies} verifies"
    exact, colder = exact_joint(tiny_folder, prompt, 1.0), exact_joint(tiny_folder, prompt, 0.7)
    plain, sage = counts_of(results["plain"], 8), counts_of(results["sage"], 8)
    p_plain, p_sage = (chi_square_pvalue(c.flatten(), exact.flatten()) for c in (plain, sage))
    assert p_plain > 1e-3, f"plain SGLang vs the exact distribution: p={p_plain}"  # the oracle is right
    assert p_sage > 1e-3, f"sage vs the exact distribution: p={p_sage}"
    # The test has power: the same samples are far from the temperature-0.7 distribution.
    assert chi_square_pvalue(sage.flatten(), colder.flatten()) < 1e-3
