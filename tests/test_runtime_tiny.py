"""The reference runtime on tiny random Llama models: greedy identity for every drafter x policy,
a model drafting for itself accepts everything, and sampling matches the target's distribution."""

import copy

import pytest
import torch
from distribution_stats import chi_square_pvalue
from tiny_models import tiny_llama
from tiny_sampling import V_SMALL, exact_pair_distribution, generator, sample_pairs

from sagespec.common.drafters import (
    LOOKUP_DRAFTERS,
    DraftModelDrafter,
    EagleDrafter,
    EagleHead,
    EagleHeadConfig,
    NgramDrafter,
    lookup_drafters,
)
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES, SagePolicy, StaticPolicy, make_policy
from sagespec.common.sampling import SamplingParams
from sagespec.common.sizing import LatencyModel, Sizer
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

PROMPT = [1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0)


@pytest.fixture(scope="module")
def oracle(target):
    ref = copy.deepcopy(target)  # stock attention, stock generate
    ref.set_attn_implementation("sdpa")
    out = ref.generate(torch.tensor([PROMPT]), max_new_tokens=48, min_new_tokens=48, do_sample=False)
    return out[0, len(PROMPT) :].tolist()


def make_drafter(name, target, seed=1):
    if name in LOOKUP_DRAFTERS:
        # The tiny model's text repeats only in short matches: let suffix drafts outrun them, so
        # chains get more than one node to verify.
        return lookup_drafters(name, {"max_spec_factor": 4.0} if name == "suffix" else {})()
    if name == "draft_model":
        return DraftModelDrafter(HFTreeLM(tiny_llama(seed=seed)))
    head = EagleHead.random(
        EagleHeadConfig.for_target(target.config), target.model.embed_tokens.weight, target.lm_head.weight, seed=seed
    )
    return EagleDrafter(head)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("drafter", ["ngram", "suffix", "draft_model", "eagle"])
def test_greedy_identity(target, oracle, drafter, policy):
    gen = generator(target, make_drafter(drafter, target), make_policy(policy))
    res = gen.generate(PROMPT, 48)
    assert res.tokens == oracle
    assert sum(res.accepted_per_step) == len(res.tokens) == 48
    assert max(res.nodes_per_step) > 1  # real trees/chains were drafted, not root-only steps


@pytest.mark.parametrize("drafter", ["ngram", "suffix", "draft_model", "eagle"])
def test_greedy_identity_with_cost_aware_sizing(target, oracle, drafter):
    sizer = Sizer(12)
    gen = generator(target, make_drafter(drafter, target), SagePolicy(budget=12), sizer=sizer)
    measured = gen.profile_latency(16)
    assert sorted(measured) == [1, 2, 4, 8, 16] and all(t > 0 for t in measured.values())
    res = gen.generate(PROMPT, 48)
    assert res.tokens == oracle
    assert sizer.latency.samples > len(measured)  # refined by the run's own steps


def steep_latency(per_token: float = 0.1) -> LatencyModel:
    """A machine where each verified token costs `per_token` of a one-token step."""
    model = LatencyModel()
    for n in (1, 2, 4, 8, 16, 32):
        model.observe_profile(n, 1.0 + per_token * (n - 1))
    return model


def test_plain_decoding_matches(target, oracle):
    assert generator(target, None, None).generate(PROMPT, 48).tokens == oracle


@pytest.mark.parametrize("policy", [StaticPolicy(), make_policy("chain", depth=5)], ids=["static", "chain"])
def test_target_as_its_own_draft_accepts_everything(target, oracle, policy):
    drafter = DraftModelDrafter(HFTreeLM(copy.deepcopy(target)))
    res = generator(target, drafter, policy).generate(PROMPT, 48)
    assert res.tokens == oracle
    depth = policy.plan(None).depth
    assert all(n == depth + 1 for n in res.accepted_per_step[1:-1])  # every step: all drafted + bonus


def test_self_draft_accepts_its_whole_greedy_line_in_dynamic_trees(target):
    drafter = DraftModelDrafter(HFTreeLM(copy.deepcopy(target)))
    gen = generator(target, drafter, SagePolicy(budget=12))
    res = gen.generate(PROMPT, 40)
    # the greedy line is the first child at every level; the rerank can cut it short but never
    # rejects it: each step accepts at least one drafted token
    assert all(n >= 2 for n in res.accepted_per_step[1:-1])


def test_eos_stops_generation(target, oracle):
    gen = SpeculativeGenerator(HFTreeLM(target), NgramDrafter(), make_policy("sage"), eos_token_ids=[oracle[5]])
    res = gen.generate(PROMPT, 48)
    assert res.tokens == oracle[: oracle.index(oracle[5]) + 1]


def test_lossy_rule_is_flagged_and_bad_rules_refused(target):
    res = generator(target, NgramDrafter(), make_policy("chain"), acceptance="typical").generate(PROMPT, 8)
    assert res.lossless is False
    with pytest.raises(ConfigError, match="unknown"):
        generator(target, NgramDrafter(), make_policy("chain"), acceptance="yolo").generate(PROMPT, 8)
    with pytest.raises(ConfigError, match="temperature 0"):
        generator(target, None, None, acceptance="greedy").generate(PROMPT, 4, SamplingParams(1.0))


# ---- sampling at temperature 1: Monte Carlo against the exact target distribution -----------


@pytest.fixture(scope="module")
def small_pair():
    target = tiny_llama(vocab_size=V_SMALL, seed=3, init_std=0.15)
    draft = tiny_llama(vocab_size=V_SMALL, seed=4, init_std=0.15)
    return target, draft, exact_pair_distribution(target, [1, 2, 3])


@pytest.mark.parametrize(
    "sampled,policy,sized",
    [(True, "chain", False), (False, "sage", False), (False, "sage", True), (True, "sage", True)],
    ids=["iid-chain", "topk-sage-tree", "topk-sage-tree-sized", "iid-sage-tree-sized"],
)
def test_sampling_matches_target_distribution(small_pair, sampled, policy, sized):
    target, draft, exact = small_pair
    drafter = DraftModelDrafter(HFTreeLM(copy.deepcopy(draft)), sample_children=sampled)
    sizer = Sizer(16, steep_latency()) if sized else None
    counts = sample_pairs(target, drafter, make_policy(policy), "auto", 1200, sizer)
    assert chi_square_pvalue(counts.flatten(), exact.flatten()) > 1e-3
    if sized:
        assert 0 < sizer.kept_share < 1 or sampled  # sizing did cut trees (sampled ones stay whole)


def test_sampling_test_detects_a_lossy_rule(small_pair):
    """Negative control: the same statistic rejects typical acceptance on the same setup."""
    target, draft, exact = small_pair
    drafter = DraftModelDrafter(HFTreeLM(copy.deepcopy(draft)))
    counts = sample_pairs(target, drafter, make_policy("sage"), "typical", 1200)
    assert chi_square_pvalue(counts.flatten(), exact.flatten()) < 1e-3
