"""Greedy output with method 'sage' (per-step trees) equals vLLM without speculation, token for
token (fp32): with a fixed budget at batch 1, with cost-aware sizing (budget "auto") at batch 8."""

import pytest
from vllm_lane import counters_during, engine, greedy_tokens, live_proposer, shape_stats

MAX_TOKENS = 128


@pytest.fixture(scope="module")
def plain_outputs(smollm2_folder, mtbench_prompts):
    with engine(smollm2_folder, spec=None, max_num_seqs=8) as llm:
        return greedy_tokens(llm, mtbench_prompts, MAX_TOKENS)


@pytest.mark.parametrize("batch, budget", [(1, 8), (8, "auto")])
@pytest.mark.parametrize("drafter", ["ngram", "eagle"])
def test_sage_equals_plain_vllm(smollm2_folder, mtbench_prompts, plain_outputs, drafter, batch, budget):
    spec = {"method": "sage", "drafter": drafter, "policy": "sage", "max_budget": 8, "budget": budget}
    with engine(smollm2_folder, spec=spec, max_num_seqs=batch) as llm:
        outputs, counts = counters_during(llm, lambda: greedy_tokens(llm, mtbench_prompts, MAX_TOKENS))
        branching = shape_stats().branching_share()
        sizer = live_proposer().sizer
    mismatched = [i for i, (a, b) in enumerate(zip(outputs, plain_outputs)) if a != b]
    assert not mismatched, f"prompts {mismatched} differ from plain vLLM"
    # The drafter really drafted and vLLM really accepted some drafts: identity is not vacuous.
    assert counts["vllm:spec_decode_num_draft_tokens"] > 0
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
    if budget == "auto":  # profiled at startup, then refined by the engine's plain and tree steps
        latency = sizer.latency
        assert latency.profiled and len(latency.points) >= 4 and latency.samples > 50
        assert set(latency.offsets) == {False, True} and sizer.calibration.trials.sum() > 0
    else:
        assert branching > 0.2, f"only {branching:.0%} of SAGE's proposals were trees"


def test_suffix_drafts_repeated_requests_from_earlier_answers(smollm2_folder, mtbench_prompts, plain_outputs):
    """The prompts twice in one engine: both passes equal plain vLLM; the second drafts from the
    first pass's answers (the shared suffix cache), so most of its tokens come from accepted drafts."""
    spec = {"method": "sage", "drafter": "suffix", "policy": "sage", "num_speculative_tokens": 8}
    with engine(smollm2_folder, spec=spec, max_num_seqs=4) as llm:
        first, before = counters_during(llm, lambda: greedy_tokens(llm, mtbench_prompts, MAX_TOKENS))
        again, after = counters_during(llm, lambda: greedy_tokens(llm, mtbench_prompts, MAX_TOKENS))
    assert first == plain_outputs and again == plain_outputs
    accepted = "vllm:spec_decode_num_accepted_tokens"
    assert after[accepted] > 2 * before[accepted]
    assert after[accepted] > 0.6 * sum(len(o) for o in again)
