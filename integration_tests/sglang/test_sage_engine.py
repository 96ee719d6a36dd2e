"""sage inside SGLang's engine on this CPU machine: greedy output equals SGLang without
speculation, token for token, with drafts accepted along the way (fp32).

SGLang runs its CPU engine (`SGLANG_USE_CPU_ENGINE=1`, `torch_native` attention) with the test-only
sgl_kernel stand-in in all its processes; the sage worker, its tree attention for TARGET_VERIFY and
its torch paths for the sgl_kernel ops speculation would call are the plugin's own
(`plugins/sglang/worker.py`, `cpu_paths.py`). So everything that runs is SGLang's code or ours."""

import json
import os
import subprocess
import sys

import pytest
from judge_files import random_judge
from sglang_lane import last_json

HERE = os.path.dirname(os.path.abspath(__file__))


def engine_runs(spec: dict) -> dict:
    env = {
        **os.environ,
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "stand_in_site"), os.path.join(HERE, "..", "..", "tests")]),
    }
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "engine_runs.py")],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    return last_json(out)


def check_identity(results: dict) -> None:
    plain = results.pop("plain")
    for name, run in results.items():
        assert run["tokens"] == plain["tokens"], name
        assert all(m["spec_verify_ct"] for m in run["meta"]), name  # sage's worker ran
        assert sum(m["spec_num_correct_drafts"] for m in run["meta"]) > 0, name  # and drafts were accepted


def lossy_marks(run: dict) -> list:
    return [m["sagespec_lossy_acceptance"] for m in run["meta"]]


def planned_widths(run: dict) -> list[int]:
    """The width the policy planned for each verified token (SGLang's meta_info, per token)."""
    return [int(shape.split("x")[1]) for m in run["meta"] for shape in m["sagespec_tree_shape"] if shape]


def check_branching(run: dict) -> None:
    widths = planned_widths(run)
    assert widths and max(widths) > 1, "the policy never planned a tree wider than a chain"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from tiny_models import tiny_llama

    folder = tmp_path_factory.mktemp("tiny-llama-weights")
    tiny_llama(vocab_size=256).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_draft_folder(tmp_path_factory):
    """The tiny target's first layer alone (same seed): a draft that agrees with it only sometimes."""
    from tiny_models import tiny_llama

    folder = tmp_path_factory.mktemp("tiny-llama-draft")
    tiny_llama(vocab_size=256, layers=1).save_pretrained(folder)
    return str(folder)


def test_tiny_model_greedy_identity_with_sage_trees_and_dynamic_trees(tiny_folder):
    # Repeating prompts give prompt lookup something to propose.
    prompts = [[5, 6, 7, 8] * 4, [40, 41, 42] * 5 + [40], list(range(60, 72)) * 2, [9, 9, 10, 9, 9, 10, 9]]
    results = engine_runs(
        {
            "model": tiny_folder,
            "prompts": prompts,
            "max_new_tokens": 32,
            "configs": {
                "plain": {},
                "sage": {"speculative_algorithm": "sage", "speculative_num_draft_tokens": 7},
                "dynamic 3x2": {
                    "speculative_algorithm": "sage",
                    "speculative_num_draft_tokens": 7,
                    "speculative_num_steps": 3,
                    "speculative_eagle_topk": 2,
                    "speculative_adaptive_config": json.dumps(
                        {"policy": "dynamic", "drafter_options": {"min_ngram": 1}}
                    ),
                },
            },
        }
    )
    check_branching(results["sage"])
    assert set(planned_widths(results["dynamic 3x2"])) == {2}
    check_identity(results)


def test_mixed_batch_of_eight_greedy_identity_and_seeds(tiny_folder):
    """Four greedy and four seeded sampled requests in one batch: the greedy ones equal SGLang
    without speculation; a seeded one gives the same output alone and in the batch; two seeds give
    two outputs."""
    greedy = [[5, 6, 7, 8] * 4, [40, 41, 42] * 5 + [40], list(range(60, 72)) * 2, [9, 9, 10, 9, 9, 10, 9]]
    sampled = [[20, 21, 22] * 4, [20, 21, 22] * 4, [30, 31] * 5, [50, 51, 52, 53] * 3]
    per_prompt = [{}] * 4 + [{"temperature": 0.8, "sampling_seed": s} for s in (11, 12, 13, 14)]
    sage = {"speculative_algorithm": "sage", "speculative_num_draft_tokens": 7}
    results = engine_runs(
        {
            "model": tiny_folder,
            "prompts": greedy + sampled,
            "max_new_tokens": 24,
            "per_prompt": per_prompt,
            "one_at_a_time": ["sage alone"],
            "configs": {
                "plain": {"max_running_requests": 8},
                "sage": {**sage, "max_running_requests": 8},
                "sage alone": sage,
            },
        }
    )
    together, alone = results["sage"]["tokens"], results["sage alone"]["tokens"]
    assert together[:4] == results["plain"]["tokens"][:4]
    assert together[4:] == alone[4:], "a seeded request's output depends on the batch it ran in"
    assert together[4] != together[5], "two seeds gave the same output"
    assert sum(m["spec_num_correct_drafts"] for m in results["sage"]["meta"]) > 0


def test_tiny_model_draft_model_and_judge(tiny_folder, tiny_draft_folder, tmp_path):
    """A draft model keeps greedy identity; a judge that accepts nothing extra (threshold 0) too,
    with every token after the first marked as emitted under the lossy rule; a judge that accepts
    every draft changes the output, so the judge really reads the verify forward's hidden rows."""
    prompts = [[5, 6, 7, 8] * 4, [40, 41, 42] * 5 + [40], list(range(60, 72)) * 2]
    nothing = random_judge(tmp_path / "nothing.json", 64)
    everything = random_judge(tmp_path / "everything.json", 64, mean=[0.0] * 64, scale=[1.0] * 64, bias=-1e4)
    sage = {"speculative_algorithm": "sage", "speculative_num_draft_tokens": 5}

    def judge(path, threshold):
        return {
            **sage,
            "speculative_adaptive_config": json.dumps(
                {"acceptance": {"rule": "judge", "path": path, "threshold": threshold}}
            ),
        }

    results = engine_runs(
        {
            "model": tiny_folder,
            "prompts": prompts,
            "max_new_tokens": 32,
            "configs": {
                "plain": {},
                "draft model": {**sage, "speculative_draft_model_path": tiny_draft_folder},
                "judge, nothing extra": judge(nothing, 0.0),
                "judge, everything": judge(everything, 1.0),
            },
        }
    )
    accept_all = results.pop("judge, everything")
    assert accept_all["tokens"] != results["plain"]["tokens"]
    assert lossy_marks(results["draft model"]) == [None] * len(prompts)  # lossless outputs carry no mark
    for marks, meta in zip(lossy_marks(results["judge, nothing extra"]), results["judge, nothing extra"]["meta"]):
        assert marks == [None] + ["judge"] * (meta["completion_tokens"] - 1)
    check_identity(results)


def test_smollm2_greedy_identity_on_mt_bench(mtbench_8, smollm2_folder):
    """Prompt lookup and the EAGLE head shipped for SmolLM2 (features: the target layers' states
    SGLang captures in its own forwards), both with SAGE trees."""
    results = engine_runs(
        {
            "model": smollm2_folder,
            "prompts": mtbench_8,
            "max_new_tokens": 64,
            "configs": {
                "plain": {},
                "sage": {"speculative_algorithm": "sage"},
                "sage eagle": {"speculative_algorithm": "sage", "speculative_adaptive_config": '{"drafter": "eagle"}'},
            },
        }
    )
    check_branching(results["sage"])
    check_branching(results["sage eagle"])
    check_identity(results)


@pytest.mark.parametrize("arch", ["gemma3", "gemma2-softcap"])
def test_sliding_window_greedy_identity(tmp_path, arch):
    """Gemma 3 / Gemma 2 (sliding window 8, and soft-capped scores in Gemma 2) with contexts far
    longer than the window: sage trees equal plain SGLang, drafting from prompt lookup and from the
    model itself."""
    from tiny_models import tiny_gemma2, tiny_gemma3

    make = tiny_gemma3 if arch == "gemma3" else tiny_gemma2
    make(vocab_size=256, sliding_window=8).save_pretrained(tmp_path)
    prompts = [[5, 6, 7, 8] * 4, [40, 41, 42] * 5 + [40], list(range(60, 72)) * 2]
    sage = {"speculative_algorithm": "sage", "speculative_num_draft_tokens": 7}
    results = engine_runs(
        {
            "model": str(tmp_path),
            "prompts": prompts,
            "max_new_tokens": 32,
            "configs": {
                "plain": {},
                "sage": sage,
                "self-draft": {**sage, "speculative_draft_model_path": str(tmp_path)},
            },
        }
    )
    check_branching(results["sage"])
    check_identity(results)


def test_gemma3_270m_greedy_identity_past_the_window():
    """The real Gemma 3 270M (fp32, sliding window 512): a prompt longer than the window and a short
    one, SAGE trees from prompt lookup against plain SGLang."""
    from transformers import AutoTokenizer

    from sagespec.common.datasets import load_prompts
    from sagespec.plugins.transformers.model_loading import gemma3_folder

    folder = gemma3_folder()
    tok = AutoTokenizer.from_pretrained(folder)
    texts = [p.text for p in load_prompts("mt-bench", 20)]
    prompts = [tok("\n\n".join(texts))["input_ids"], tok(texts[0])["input_ids"]]
    assert len(prompts[0]) > 600
    results = engine_runs(
        {
            "model": str(folder),
            "prompts": prompts,
            "max_new_tokens": 32,
            "configs": {"plain": {}, "sage": {"speculative_algorithm": "sage", "speculative_num_draft_tokens": 8}},
        }
    )
    check_identity(results)


def test_suffix_drafter_greedy_identity_and_drafts_from_earlier_requests(tiny_folder):
    """Each prompt twice, one request at a time: outputs equal SGLang without speculation, and the
    second time the suffix cache holds the first answer, so more drafts are accepted."""
    prompts = [[5, 6, 7, 8, 12, 30], [40, 41, 42, 17, 3], [60, 61, 62, 90, 91]] * 2
    suffix = {
        "speculative_algorithm": "sage",
        "speculative_num_draft_tokens": 7,
        "speculative_adaptive_config": json.dumps({"drafter": "suffix"}),
    }
    results = engine_runs(
        {
            "model": tiny_folder,
            "prompts": prompts,
            "max_new_tokens": 32,
            "one_at_a_time": ["suffix"],
            "configs": {"plain": {}, "suffix": suffix},
        }
    )
    correct = [m["spec_num_correct_drafts"] for m in results["suffix"]["meta"]]
    check_identity(results)
    assert sum(correct[3:]) > sum(correct[:3]) + 3 * 16, f"accepted drafts per request: {correct}"
