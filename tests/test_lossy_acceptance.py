"""Lossy acceptance rules (typical, kl-judge, judge): at their accept-nothing-extra setting they
reproduce lossless output exactly, greedy and sampled; loosened, they accept more; judge files
are validated; the learned judge reads the verify forward's own hidden rows."""

import json
import math
from pathlib import Path

import pytest
import torch
from judge_files import random_judge
from tiny_models import tiny_llama

from sagespec.common.drafters import EagleDrafter, EagleHead, EagleHeadConfig, NgramDrafter
from sagespec.common.params import ConfigError
from sagespec.common.policies import make_policy
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams
from sagespec.common.tree import DraftTree
from sagespec.common.verify import JudgeFile, verify
from sagespec.common.verify.acceptance import check_acceptance, parse_acceptance
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

PROMPT = [1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3]
HIDDEN = 64


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0)


def eagle(target, seed=1):
    head = EagleHead.random(
        EagleHeadConfig.for_target(target.config), target.model.embed_tokens.weight, target.lm_head.weight, seed=seed
    )
    return EagleDrafter(head)


def run(target, drafter, rule, options, sampling, policy="sage", n=32):
    layers = drafter.needs.hidden_layer_ids
    gen = SpeculativeGenerator(
        HFTreeLM(target, hidden_layer_ids=layers),
        drafter,
        make_policy(policy),
        acceptance=rule,
        acceptance_options=options,
    )
    return gen.generate(PROMPT, n, sampling, seed=3)


def nothing_extra(tmp_path):
    return [
        ("typical", {"eps": 0.0}),
        ("kl-judge", {"threshold": 0.0}),
        ("judge", {"path": random_judge(tmp_path / "j.json", HIDDEN), "threshold": 0.0}),
    ]


@pytest.mark.parametrize("temperature", [0.0, 0.5])  # T=0.5 keeps text repetitive enough for lookup
@pytest.mark.parametrize("drafter", ["ngram", "eagle"])
def test_accept_nothing_extra_reproduces_lossless_output(target, tmp_path, drafter, temperature):
    sampling = SamplingParams(temperature=temperature)
    make = (lambda: NgramDrafter()) if drafter == "ngram" else (lambda: eagle(target))
    lossless = run(target, make(), "auto", {}, sampling)
    assert lossless.lossless and max(lossless.nodes_per_step) > 1
    for rule, options in nothing_extra(tmp_path):
        res = run(target, make(), rule, options, sampling)
        assert res.tokens == lossless.tokens, rule
        assert res.accepted_per_step == lossless.accepted_per_step, rule
        assert res.lossless is False and res.acceptance == rule and res.acceptance_options == options


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_loosened_rules_accept_more(target, tmp_path, temperature):
    """A random head's drafts are rarely right; a judge that accepts everything takes every chain whole."""
    sampling = SamplingParams(temperature=temperature)
    lossless = run(target, eagle(target), "auto", {}, sampling, policy="chain")
    loose = [
        ("kl-judge", {"threshold": 1e9}),
        ("typical", {"eps": 1.0, "delta": 1e-30}),
        ("judge", {"path": random_judge(tmp_path / "j.json", HIDDEN, bias=-1e4), "threshold": 1.0}),
    ]
    depth = make_policy("chain").plan(None).depth
    for rule, options in loose:
        res = run(target, eagle(target), rule, options, sampling, policy="chain")
        assert res.mean_accepted_length > lossless.mean_accepted_length + 1, rule
        assert all(a == depth + 1 for a in res.accepted_per_step[1:-1]), rule
        assert res.tokens != lossless.tokens, rule


def test_judge_reads_the_hidden_row_of_each_child():
    """Root 0 with children 1 (token 4) and 2 (token 5); the target wants token 3. The judge's
    p(important) is sigmoid(h[0]) here, so the child whose row is unimportant is followed."""
    tree = DraftTree.from_parents([0, 4, 5], [-1, 0, 0])
    logits = torch.zeros(3, 8)
    logits[:, 3] = 5.0
    judge = JudgeFile(hidden_size=2, mean=(0.0, 0.0), scale=(1.0, 1.0), weights=(1.0, 0.0), bias=0.0)
    hidden = torch.tensor([[0.0, 0.0], [4.0, 0.0], [-4.0, 0.0]])  # child 1: p = 0.98, child 2: p = 0.02
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/j.json"
        judge.save(path)
        out = verify(
            tree, logits, SamplingParams(), "judge", TorchRandom(0), target_hidden=hidden, path=path, threshold=0.5
        )
        assert out.nodes == (0, 2) and out.bonus == 3
        out = verify(
            tree, logits, SamplingParams(), "judge", TorchRandom(0), target_hidden=hidden, path=path, threshold=0.01
        )
        assert out.nodes == (0,) and out.bonus == 3
    torch.testing.assert_close(
        judge.probability(hidden[1:]).float(), torch.sigmoid(torch.tensor([4.0, -4.0])), rtol=1e-6, atol=0
    )


def test_kl_judge_reads_draft_distributions():
    """With the draft's distribution equal to the target's (KL 0), a threshold just above 0
    accepts the drafted child although the target's argmax differs."""
    logits = torch.tensor([[2.0, 1.9, -3.0, -3.0]] * 2)
    q = torch.softmax(logits, -1)
    tree = DraftTree.from_parents([0, 1], [-1, 0], draft_probs=q)
    out = verify(tree, logits, SamplingParams(), "kl-judge", TorchRandom(0), threshold=1e-6)
    assert out.nodes == (0, 1)
    far = torch.tensor([[-3.0, 4.0, 2.0, -3.0]] * 2).softmax(-1)
    tree = DraftTree.from_parents([0, 1], [-1, 0], draft_probs=far)
    out = verify(tree, logits, SamplingParams(), "kl-judge", TorchRandom(0), threshold=0.5)
    assert out.nodes == (0,) and out.bonus == 0


def test_judge_files_are_validated(target, tmp_path):
    with pytest.raises(ConfigError, match=r"hidden_size=32.*hidden_size is 64"):
        check_acceptance("judge", {"path": random_judge(tmp_path / "a.json", 32), "threshold": 0.1}, 96, HIDDEN)
    bad = random_judge(tmp_path / "b.json", HIDDEN)
    raw = json.loads(Path(bad).read_text())
    raw["weights"][3] = math.nan
    (tmp_path / "b.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"weights\[3\]=nan is not finite"):
        check_acceptance("judge", {"path": bad, "threshold": 0.1}, 96, HIDDEN)
    raw = json.loads(Path(random_judge(tmp_path / "c.json", HIDDEN)).read_text())
    del raw["bias"]
    (tmp_path / "c.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"missing fields \['bias'\]"):
        check_acceptance("judge", {"path": str(tmp_path / "c.json"), "threshold": 0.1}, 96, HIDDEN)
    good = random_judge(tmp_path / "d.json", HIDDEN)
    with pytest.raises(ConfigError, match="operating points"):
        check_acceptance("judge", {"path": good, "threshold": "q99"}, 96, HIDDEN)
    check_acceptance("judge", {"path": good, "threshold": "q50"}, 96, HIDDEN)
    with pytest.raises(ConfigError, match="does not exist"):
        check_acceptance("judge", {"path": str(tmp_path / "none.json"), "threshold": 0.1}, 96, HIDDEN)


def test_acceptance_specs_parse_and_fail_clearly():
    assert parse_acceptance("auto", "x") == ("auto", {})
    assert parse_acceptance('{"rule": "kl-judge", "threshold": 0.3}', "x") == ("kl-judge", {"threshold": 0.3})
    with pytest.raises(ConfigError, match="needs a 'rule' key"):
        parse_acceptance({"threshold": 1}, "x")
    with pytest.raises(ConfigError, match="'auto' takes no options"):
        parse_acceptance({"rule": "auto", "eps": 1}, "x")
    with pytest.raises(ConfigError, match="unknown option"):
        check_acceptance("kl-judge", {"treshold": 0.1}, 96, HIDDEN)
    with pytest.raises(ConfigError, match=r"threshold=-1\.0 is out of range"):
        check_acceptance("kl-judge", {"threshold": -1}, 96, HIDDEN)
