"""Greedy output with method 'sage' (per-step trees) equals vLLM without speculation, token for
token (fp32): with a fixed budget at batch 1, with cost-aware sizing (budget "auto") at batch 8."""

import pytest
import torch
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


@pytest.mark.parametrize(
    "drafter, batch, budget, options",
    [("medusa", 1, 8, {}), ("cascade", 4, "auto", {"sources": ["ngram", "suffix", "medusa"]})],
    ids=["medusa-b1", "cascade-b4-auto"],
)
def test_medusa_and_cascade_equal_plain_vllm(
    smollm2_folder, mtbench_prompts, plain_outputs, drafter, batch, budget, options
):
    """The shipped Medusa heads (final hidden states from vLLM's own forward) and the DyTC cascade
    over lookup and the heads."""
    spec = {"method": "sage", "drafter": drafter, "policy": "sage", "max_budget": 8, "budget": budget}
    if options:
        spec["drafter_options"] = options
    with engine(smollm2_folder, spec=spec, max_num_seqs=batch) as llm:
        outputs, counts = counters_during(llm, lambda: greedy_tokens(llm, mtbench_prompts, MAX_TOKENS))
    mismatched = [i for i, (a, b) in enumerate(zip(outputs, plain_outputs)) if a != b]
    assert not mismatched, f"prompts {mismatched} differ from plain vLLM"
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0


def test_exported_medusa_heads_run_in_vllms_own_method(smollm2_folder, mtbench_prompts, plain_outputs, tmp_path):
    """The shipped heads exported to vLLM's Medusa format load and draft in vLLM's `medusa` method."""
    from sagespec.common.shipped import shipped_medusa
    from sagespec.plugins.transformers.drafter_export import export_head_for_vllm

    folder = export_head_for_vllm(shipped_medusa("smollm2"), smollm2_folder, tmp_path / "medusa", dtype=torch.float32)
    spec = {"method": "medusa", "model": str(folder), "num_speculative_tokens": 4}
    with engine(smollm2_folder, spec=spec, max_num_seqs=1) as llm:
        outputs, counts = counters_during(llm, lambda: greedy_tokens(llm, mtbench_prompts[:2], MAX_TOKENS))
    assert outputs == plain_outputs[:2]
    assert counts["vllm:spec_decode_num_accepted_tokens"] > 0
