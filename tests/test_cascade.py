"""The DyTC cascade: the router's arithmetic and choices, merged trees, greedy identity and exact
sampling with self levels, lookup and Medusa heads together."""

import pytest
from distribution_stats import chi_square_pvalue
from test_medusa import random_heads
from tiny_models import tiny_llama
from tiny_sampling import V_SMALL, exact_pair_distribution, generator, greedy_oracle, sample_pairs

from sagespec.common.drafters import (
    CascadeDrafter,
    DyTCRouter,
    MedusaDrafter,
    NgramDrafter,
    SelfDrafter,
    SelfLevel,
    merge_trees,
)
from sagespec.common.drafters.dytc import EXPLORE_EVERY, accepted_depth, reach
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES, make_policy
from sagespec.common.tree import DraftTree

PROMPT = [1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3]


def test_reach_is_the_expected_emitted_tokens():
    assert reach([], []) == 1.0
    assert reach([0.5], [3]) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    # two branches: depth 1 is reached unless both miss
    assert reach([0.5, 0.5], [1, 1]) == pytest.approx(1 + (1 - 0.25))


def test_accepted_depth_walks_the_emitted_tokens():
    tree = DraftTree.from_parents([0, 5, 6, 7, 8], [-1, 0, 1, 0, 3])  # 5-6 and 7-8
    assert accepted_depth(tree, [5, 6, 9]) == (2, False)
    assert accepted_depth(tree, [7, 4]) == (1, True)
    assert accepted_depth(tree, [3]) == (0, True)


def timed_router(acceptance, level_seconds, step_seconds=1.0):
    router = DyTCRouter(("ngram",), ("self-a", "self-b"))
    for name, a in acceptance.items():
        router.stats[name].prior = a
    for name, s in level_seconds.items():
        router.stats[name].level_seconds = s
    router.time_step(step_seconds, 1)
    return router


def test_route_prefers_the_source_with_more_tokens_per_second():
    router = timed_router({"ngram": 0.1, "self-a": 0.9, "self-b": 0.5}, {"self-a": 0.2, "self-b": 0.05})
    route = router.route({"ngram": 0}, 6)
    assert route.source == "self-a" and route.depth >= 3
    # the same rates, but drafting costs as much as a step: drafting does not pay
    router = timed_router({"ngram": 0.1, "self-a": 0.3, "self-b": 0.3}, {"self-a": 1.0, "self-b": 1.0})
    assert router.route({"ngram": 2}, 6).source is None


def test_route_charges_what_verifying_a_bigger_tree_costs():
    """The same source and rates; when each verified token adds 30% of a step, deep drafts stop
    paying and the router drafts shallower."""
    flat = timed_router({"ngram": 0.1, "self-a": 0.6, "self-b": 0.1}, {"self-a": 0.01, "self-b": 5.0})
    steep = timed_router({"ngram": 0.1, "self-a": 0.6, "self-b": 0.1}, {"self-a": 0.01, "self-b": 5.0})
    for n in (2, 4, 8, 16):
        flat.time_step(1.0, n)
        steep.time_step(1.0 + 0.3 * (n - 1), n)
    deep, shallow = flat.route({"ngram": 0}, 6, width=1, budget=6), steep.route({"ngram": 0}, 6, width=1, budget=6)
    assert deep.source == shallow.source == "self-a"
    assert deep.depth == 6 and shallow.depth < deep.depth


def test_route_explores_a_source_left_idle():
    router = timed_router({"ngram": 0.1, "self-a": 0.9, "self-b": 0.1}, {"self-a": 0.1, "self-b": 0.5})
    picks = [router.route({"ngram": 0}, 4).source for _ in range(3 * EXPLORE_EVERY)]
    assert picks.count("self-b") >= 2 and picks.count("self-a") > 2 * EXPLORE_EVERY


def test_untimed_sources_are_tried_first():
    router = DyTCRouter(("ngram",), ("medusa",))
    assert router.route({"ngram": 3}, 4).source == "medusa"


def test_observe_updates_each_source_from_its_own_tree():
    router = DyTCRouter(("ngram",), ("self-a",))
    router.observe({"ngram": DraftTree.chain(0, [5, 6, 7]), "self-a": DraftTree.chain(0, [9])}, emitted=[5, 6, 1])
    assert (router.stats["ngram"].accepted, router.stats["ngram"].trials) == (2, 3)
    assert (router.stats["self-a"].accepted, router.stats["self-a"].trials) == (0, 1)


def test_merge_trees_keeps_order_budget_and_chains():
    a, b = DraftTree.chain(0, [5, 6]), DraftTree.from_parents([0, 5, 7, 8], [-1, 0, 1, 0])
    merged = merge_trees(0, [a, b], max_nodes=10)
    assert sorted(tuple(int(merged.tokens[i]) for i in p[1:]) for p in merged.root_to_leaf_paths()) == [
        (5, 6),
        (5, 7),
        (8,),
    ]
    assert merge_trees(0, [a, b], max_nodes=2).num_drafted == 2
    chain = merge_trees(0, [b, a], max_nodes=10, chain=True)
    assert chain.max_depth == chain.num_drafted == 2


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, layers=4)


@pytest.fixture(scope="module")
def oracle(target):
    return greedy_oracle(target, PROMPT, 40)


def cascade(target, layers, with_medusa=True):
    levels = [SelfLevel(frozenset({2}), 0.6, 0.75), SelfLevel(frozenset({1, 2}), 0.4, 0.5)]
    models = {lv.name: SelfDrafter([lv], layers) for lv in levels}
    if with_medusa:
        models["medusa"] = MedusaDrafter(random_heads(target))
    priors = {lv.name: lv.agreement for lv in levels}
    return CascadeDrafter({"ngram": NgramDrafter()}, models, DyTCRouter(("ngram",), tuple(models), priors))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_greedy_identity(target, oracle, policy):
    drafter = cascade(target, 4)
    res = generator(target, drafter, make_policy(policy)).generate(PROMPT, 40)
    assert res.tokens == oracle
    assert max(res.nodes_per_step) > 1
    timed = [name for name, s in drafter.router.stats.items() if s.level_seconds is not None]
    assert sorted(timed) == ["medusa", "self-1", "self-2"]  # every model source drafted at least once
    assert drafter.router.stats["ngram"].trials > 0


def test_sampling_matches_target_distribution():
    target = tiny_llama(vocab_size=V_SMALL, seed=3, init_std=0.15, layers=3)
    exact = exact_pair_distribution(target, [1, 2, 3])
    counts = sample_pairs(target, cascade(target, 3), make_policy("sage"), "auto", 1200)
    assert chi_square_pvalue(counts.flatten(), exact.flatten()) > 1e-3


def test_sources_reading_different_layers_are_refused(target):
    from sagespec.common.drafters import EagleDrafter, EagleHead, EagleHeadConfig

    eagle = EagleDrafter(
        EagleHead.random(
            EagleHeadConfig.for_target(target.config, (1, 2, 3)),
            target.model.embed_tokens.weight,
            target.lm_head.weight,
        )
    )
    with pytest.raises(ConfigError, match="read different target layers"):
        CascadeDrafter(
            {}, {"eagle": eagle, "medusa": MedusaDrafter(random_heads(target))}, DyTCRouter((), ("eagle", "medusa"))
        )
    with pytest.raises(ConfigError, match="no draft sources"):
        CascadeDrafter({}, {}, DyTCRouter((), ()))
