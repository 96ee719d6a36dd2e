"""Lossy acceptance through vLLM: a judge that accepts nothing extra gives plain vLLM's output
token for token; one that accepts everything takes every draft (so the judge really reads the
rows' hidden states); a judge for another hidden size fails at startup (fp32)."""

import pytest
from judge_files import random_judge
from vllm_lane import counters_during, engine, greedy_tokens

MAX_TOKENS = 64
HIDDEN = 576  # SmolLM2-135M


def judge_file(path, hidden=HIDDEN, bias=0.0):
    """Centred and unscaled: p(important) = sigmoid(w . h + bias)."""
    return random_judge(path, hidden, mean=[0.0] * hidden, scale=[1.0] * hidden, bias=bias)


@pytest.fixture(scope="module")
def prompts(mtbench_prompts):
    return mtbench_prompts[:4]


@pytest.fixture(scope="module")
def plain_outputs(smollm2_folder, prompts):
    with engine(smollm2_folder, spec=None, max_num_seqs=4) as llm:
        return greedy_tokens(llm, prompts, MAX_TOKENS)


def run_sage(smollm2_folder, prompts, acceptance, policy="sage", budget=8):
    spec = {
        "method": "sage",
        "drafter": "eagle",
        "policy": policy,
        "num_speculative_tokens": budget,
        "acceptance": acceptance,
    }
    with engine(smollm2_folder, spec=spec, max_num_seqs=4) as llm:
        return counters_during(llm, lambda: greedy_tokens(llm, prompts, MAX_TOKENS, with_marks=True))


def test_judge_accepting_nothing_extra_equals_plain_vllm(smollm2_folder, prompts, plain_outputs, tmp_path):
    (outputs, marks), counts = run_sage(
        smollm2_folder, prompts, {"rule": "judge", "path": judge_file(tmp_path / "j.json"), "threshold": 0.0}
    )
    assert outputs == plain_outputs
    assert marks == ["judge"] * len(prompts)  # each output says it was verified by a lossy rule
    drafted, accepted = counts["vllm:spec_decode_num_draft_tokens"], counts["vllm:spec_decode_num_accepted_tokens"]
    assert 0 < accepted < drafted  # drafts were made and some were rejected: the judge was asked


def test_judge_accepting_everything_takes_every_draft(smollm2_folder, prompts, plain_outputs, tmp_path):
    """p(important) = sigmoid(-1e4 + ...) ~ 0 < 1 for every row: every drafted chain is taken whole
    (only the last step of a request may be cut by max_tokens)."""
    (outputs, _), counts = run_sage(
        smollm2_folder,
        prompts,
        {"rule": "judge", "threshold": 1.0, "path": judge_file(tmp_path / "j.json", bias=-1e4)},
        policy="chain",
        budget=4,
    )
    assert outputs != plain_outputs
    drafted, accepted = counts["vllm:spec_decode_num_draft_tokens"], counts["vllm:spec_decode_num_accepted_tokens"]
    assert accepted >= 0.9 * drafted > 0


def test_judge_for_another_hidden_size_fails_at_startup(smollm2_folder, tmp_path):
    with (
        pytest.raises(Exception) as err,
        engine(
            smollm2_folder,
            spec={
                "method": "sage",
                "acceptance": {"rule": "judge", "threshold": 0.1, "path": judge_file(tmp_path / "j.json", hidden=64)},
            },
        ),
    ):
        pass
    message = "the judge was trained for hidden_size=64; this target's hidden_size is 576"
    assert message in str(err.value) or message in repr(err.value.__cause__)
