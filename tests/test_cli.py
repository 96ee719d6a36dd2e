"""The `sagespec` command: the JSON contract, and one clear line (exit 2) for bad input."""

import json
import subprocess
import sys

import pytest

from sagespec.plugins.transformers.cli.main import main


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "sagespec.plugins.transformers.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["generate", "--prompt", "x", "--budget", "0"], "--budget 0"),
        (["generate", "--prompt", "x", "--temperature", "-1"], "temperature=-1.0"),
        (["generate", "--prompt-file", "/no/such/file"], "--prompt-file"),
        (["generate", "--prompt", "x", "--model", "/no/such/model"], "no such folder"),
        (["generate", "--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens 0"),
        (["generate", "--prompt", "x", "--acceptance", "yolo"], "--acceptance: acceptance rule 'yolo' is unknown"),
        (
            ["generate", "--prompt", "x", "--acceptance", '{"rule": "judge"'],
            "--acceptance: acceptance is not valid JSON",
        ),
        (["generate", "--prompt", "x", "--acceptance", '{"threshold": 1}'], "needs a 'rule' key"),
        (["mine-judge", "--out", "{tmp}", "--splits", "train,dev"], "--splits 'train,dev'"),
        (["train-judge", "--mined", "{tmp}", "--out", "{tmp}/j.json"], "not a folder written by `sagespec mine-judge`"),
        (["bench", "--dataset", "gsm8k"], "invalid choice: 'gsm8k'"),
        (["bench", "--dataset", "mt-bench", "ngram:fancy"], "policy 'fancy'"),
        (["generate", "--prompt", "x", "--drafter", "draft_model", "--model", "{tmp}"], "config.json"),
        (["train-drafter", "--out", "{tmp}"], "needs a budget"),
        (["train-drafter", "--out", "{tmp}", "--max-tokens", "9", "--answers", "{tmp}"], "no shard-*.jsonl answers"),
        (["train-drafter", "--out", "{tmp}", "--max-tokens", "9", "--held-out", "{tmp}"], "goes with --answers"),
        (
            ["train-drafter", "--out", "{tmp}", "--max-tokens", "9", "--resize-draft-vocab", "8"],
            "--resize-draft-vocab goes with --answers",
        ),
        (["train-drafter", "--out", "{tmp}", "--max-tokens", "9", "--train-dtype", "bfloat16"], "--train-dtype goes"),
        (
            ["train-drafter", "--out", "{tmp}", "--max-tokens", "9", "--drafter", "medusa", "--answers", "{tmp}"],
            "--answers trains an eagle head",
        ),
        (
            ["generate", "--prompt", "x", "--drafter", "self", "--self-levels", "0.5,1.5"],
            "each share must lie in (0, 1)",
        ),
        (
            ["generate", "--prompt", "x", "--drafter", "cascade", "--cascade-sources", "self,eagle"],
            "--cascade-sources self,eagle: each source once, from ['ngram', 'suffix', 'self', 'medusa']",
        ),
        (["generate", "--prompt", "x", "--drafter", "medusa", "--medusa-heads", "{tmp}"], "has no config.json"),
        (
            ["generate", "--prompt", "x", "--eagle-head", "{tmp}", "--drafter", "eagle", "--model", "{tmp}"],
            "config.json",
        ),
    ],
)
def test_bad_input_is_one_clear_line(args, fragment, tmp_path, capsys):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own checks exit directly
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sagespec: error:") and fragment in err[0]


@pytest.mark.slow
def test_generate_json_contract():
    out = run_cli(
        "generate",
        "--model",
        "smollm2",
        "--prompt",
        "Name three colors.",
        "--drafter",
        "ngram",
        "--policy",
        "sage",
        "--max-new-tokens",
        "12",
        "--temperature",
        "0",
        "--seed",
        "1",
        "--json",
        "--threads",
        "2",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert set(obj) >= {"tokens", "text", "steps", "accepted_per_step", "seconds"}
    assert len(obj["tokens"]) == sum(obj["accepted_per_step"]) and len(obj["accepted_per_step"]) == obj["steps"]
    assert obj["text"].strip()
