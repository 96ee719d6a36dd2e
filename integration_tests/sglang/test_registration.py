"""Registration through SGLang's plugin entry points, server arguments with sage resolved by
SGLang itself, and SGLang releases or hooks we do not support."""

import json

import pytest
from sglang_lane import last_json, run_python

DISCOVER = """
    import json
    from importlib.metadata import entry_points
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sagespec.plugins.sglang import registration
    algo = SpeculativeAlgorithm.from_string("sage")
    registration.register()  # a second call changes nothing (a second registration would raise)
    print(json.dumps({"entry_points": [e.value for e in entry_points(group="sglang.srt.plugins")],
                      "class": type(algo).__name__, "name": algo.name, "state": registration._state,
                      "has_draft_kv": algo.has_draft_kv(), "need_topk": algo.need_topk(),
                      "carries_hidden": algo.carries_draft_hidden_states(),
                      "is_eagle": algo.is_eagle(), "same": SpeculativeAlgorithm.from_string("SAGE") is algo}))
"""


def test_entry_point_registers_sage_in_a_fresh_process():
    found = last_json(run_python(DISCOVER))
    assert "sagespec.plugins.sglang:register" in found["entry_points"]
    assert (found["class"], found["name"], found["same"]) == ("SageSpecAlgo", "SAGE", True)
    assert found["state"] == {"done": True, "refused": None}
    # the capabilities SGLang's scheduler asks of every algorithm, which the default class lacks
    assert not (found["has_draft_kv"] or found["need_topk"] or found["carries_hidden"] or found["is_eagle"])


# Each case: extra argv after --speculative-algorithm sage, then what resolution gives or the error.
PARSE = """
    import json, sys
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.arg_groups.overrides import resolving_view
    model, cases = sys.argv[1], json.loads(sys.argv[2])
    results = []
    for extra in cases:
        argv = ["--model-path", model, "--device", "cpu", "--skip-tokenizer-init",
                "--speculative-algorithm", "sage", *extra]
        try:
            args = prepare_server_args(argv)
            args.resolve_once()
            view = resolving_view(args)
            results.append({"ok": [view.speculative_num_draft_tokens, view.speculative_num_steps,
                                   view.speculative_eagle_topk, view.disable_radix_cache]})
        except BaseException as e:
            results.append({"error": f"{type(e).__name__}: {e}"})
    print(json.dumps(results))
"""

GOOD = [
    ([], [9, 8, 8, False]),
    (
        ["--speculative-num-draft-tokens", "12", "--speculative-num-steps", "5", "--speculative-eagle-topk", "3"],
        [12, 5, 3, False],
    ),
    (
        ["--speculative-adaptive-config", json.dumps({"policy": "chain", "acceptance": {"rule": "typical"}})],
        [9, 8, 8, False],
    ),
    (["--speculative-adaptive-config", '{"drafter": "eagle"}'], [9, 8, 8, True]),  # features need every prefix
]
BAD = [
    (["--speculative-num-steps", "20"], "--speculative-num-steps=20 is out of range"),
    (["--speculative-adaptive-config", '{"colour": "blue"}'], "unknown option(s) ['colour']"),
    (["--speculative-adaptive-config", '{"acceptance": "nope"}'], "acceptance rule 'nope' is unknown"),
    (
        ["--speculative-adaptive-config", '{"policy_options": {"max_width": 2}}'],
        "policy_options.max_width is set by --speculative-eagle-topk",
    ),
    (["--speculative-adaptive"], "--speculative-adaptive is SGLang's step-count controller"),
    (
        [
            "--speculative-adaptive-config",
            json.dumps({"drafter": "eagle", "acceptance": {"rule": "judge", "path": "judge.json", "threshold": 0.5}}),
        ],
        "drafter 'eagle' with acceptance 'judge'",
    ),
]


@pytest.fixture(scope="module")
def parsed(tiny_model):
    cases = [argv for argv, _ in GOOD + BAD]
    return last_json(run_python(PARSE, tiny_model, json.dumps(cases)))


@pytest.mark.parametrize("index", range(len(GOOD)))
def test_sage_server_args_resolve_with_sglang_flags(parsed, index):
    assert parsed[index] == {"ok": GOOD[index][1]}


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_sage_server_args_fail_naming_the_flag(parsed, index):
    result = parsed[len(GOOD) + index]
    assert "error" in result, result
    assert BAD[index][1] in result["error"] and "--speculative-algorithm sage" in result["error"]


GATE = """
    import json
    {setup}
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sagespec.plugins.sglang import registration
    try:
        SpeculativeAlgorithm.from_string("sage")
        found = "registered"
    except ValueError as e:
        found = str(e)
    print(json.dumps({{"found": found, "refused": registration._state["refused"],
                      "ngram": SpeculativeAlgorithm.from_string("ngram").name}}))
"""


@pytest.mark.parametrize(
    "setup, reason",
    [
        ("import sglang; sglang.__version__ = '0.4.0'", "SGLang 0.4.0 is not a release sagespec supports"),
        (
            "from sglang.srt.speculative.spec_registry import CustomSpecAlgo; del CustomSpecAlgo.create_worker",
            "CustomSpecAlgo.create_worker: missing",
        ),
    ],
)
def test_unsupported_sglang_is_left_unmodified_and_says_why(setup, reason):
    found = last_json(run_python(GATE.format(setup=setup)))
    assert reason in found["refused"]
    assert "Unknown speculative algorithm name: sage" in found["found"]
    assert found["ngram"] == "NGRAM"  # SGLang's own algorithms untouched
