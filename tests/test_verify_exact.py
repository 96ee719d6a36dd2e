"""Exact output distributions of the verification rules, by enumerating every random outcome.

A synthetic target gives a conditional distribution for every prefix; one speculative step
(drafting + verification) is followed by plain sampling from the target up to L tokens. For a
lossless rule the distribution of those L tokens must equal the target's own, to 1e-6."""

import zlib
from collections import defaultdict
from functools import cache
from itertools import product

import pytest
import torch
from exact_enumeration import enumerate_outcomes

from sagespec.common.drafters.expansion import grow_tree
from sagespec.common.policies import StaticPolicy, TreeShape
from sagespec.common.sampling import SamplingParams, process_logits
from sagespec.common.tree import DraftTree
from sagespec.common.verify import verify

V, L = 4, 3


@cache
def _raw(prefix, salt):
    # zlib.crc32, not hash(): str hashes change with every process (PYTHONHASHSEED).
    g = torch.Generator().manual_seed(zlib.crc32(repr((salt,) + prefix).encode()))
    return torch.randn(V, generator=g, dtype=torch.float64) * 1.5


def raw_logits(prefix, salt):
    return _raw(tuple(prefix), salt)


@cache
def target_cond(prefix, params):
    return process_logits(raw_logits(prefix, "target"), params).tolist()


def target_joint(params):
    joint = {}
    for seq in product(range(V), repeat=L):
        p = 1.0
        for i in range(L):
            p *= target_cond(seq[:i], params)[seq[i]]
        joint[seq] = p
    return joint


class DraftScorer:
    """Scores tree nodes with the synthetic draft, tracking each node's token path."""

    def __init__(self):
        self.paths = {0: ()}

    def score(self, nodes, tokens, parents, depths):
        rows = []
        for n, t, par in zip(nodes, tokens, parents):
            self.paths[n] = self.paths[par] + (t,)
            rows.append(raw_logits(self.paths[n], "draft"))
        return torch.stack(rows)


def node_prefixes(tree):
    toks = tree.tokens.tolist()
    return [tuple(toks[j] for j in tree.path_to(i)[1:]) for i in range(tree.num_nodes)]


def step_then_target(make_tree, params, rule):
    """Exact distribution of the first L tokens: one step, then plain target sampling."""

    def run(rng):
        tree = make_tree(rng)
        logits = torch.stack([raw_logits(p, "target") for p in node_prefixes(tree)])
        return tuple(verify(tree, logits, params, rule, rng).emitted(tree))

    dist = defaultdict(float)
    for prob, emitted in enumerate_outcomes(run):
        emitted = emitted[:L]
        for tail in product(range(V), repeat=L - len(emitted)):
            seq = emitted + tail
            p = prob
            for i in range(len(emitted), L):
                p *= target_cond(seq[:i], params)[seq[i]]
            dist[seq] += p
    return dist


def max_gap(dist, joint):
    return max(abs(dist.get(s, 0.0) - p) for s, p in joint.items())


def grown(shape, params, sample_children):
    return lambda rng: grow_tree(9, raw_logits((), "draft"), DraftScorer(), shape, params, rng, sample_children)


PARAMS = [
    SamplingParams(1.0),
    SamplingParams(0.7, top_k=3),
    SamplingParams(1.3, top_p=0.8),
    SamplingParams(0.8, top_k=3, top_p=0.9),
]
SHAPES = {
    "chain": TreeShape(depth=3, width=1, budget=3),
    "dynamic": TreeShape(depth=2, width=2, budget=5),
    "static": StaticPolicy(paths=[(0,), (1,), (0, 0), (1, 0), (0, 0, 0)]).shape,
}


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("shape_name", list(SHAPES))
@pytest.mark.parametrize("sample_children", [False, True], ids=["topk-children", "iid-children"])
def test_sampling_rule_is_exact(params, shape_name, sample_children):
    dist = step_then_target(grown(SHAPES[shape_name], params, sample_children), params, "sampling")
    assert abs(sum(dist.values()) - 1.0) < 1e-9
    assert max_gap(dist, target_joint(params)) < 1e-6


@pytest.mark.parametrize("params", PARAMS[:2], ids=str)
def test_sampling_rule_is_exact_for_arbitrary_fixed_trees(params):
    # Lookup-style trees: fixed tokens, duplicates among siblings, no draft distribution.
    tree = DraftTree.from_parents([9, 0, 1, 1, 2, 0, 3], [-1, 0, 0, 0, 1, 1, 4])
    dist = step_then_target(lambda rng: tree, params, "sampling")
    assert max_gap(dist, target_joint(params)) < 1e-6


def test_lossy_rule_is_detected():
    """Negative control: the same harness tells typical acceptance apart from the target."""
    params = SamplingParams(1.0)
    dist = step_then_target(grown(SHAPES["dynamic"], params, False), params, "typical")
    assert max_gap(dist, target_joint(params)) > 1e-3


def target_greedy_path(length):
    """The target's own greedy continuation of the root, computed without any rule."""
    prefix = ()
    for _ in range(length):
        prefix += (int(raw_logits(prefix, "target").argmax()),)
    return prefix


def test_greedy_rule_follows_argmax():
    t1, t2, bonus = target_greedy_path(3)

    def other(token):  # a token the target does not pick
        return (token + 1) % V

    # Decoys before the right children, and the right second token under the wrong first one.
    tree = DraftTree.from_parents([9, other(t1), t1, t2, other(t2), t2], [-1, 0, 0, 1, 2, 2])
    logits = torch.stack([raw_logits(p, "target") for p in node_prefixes(tree)])
    acc = verify(tree, logits, SamplingParams(0.0), "greedy")
    assert acc.nodes == (0, 2, 5)
    assert acc.emitted(tree) == [t1, t2, bonus]
    # No child carries the argmax: only the target's own token comes out.
    miss = DraftTree.from_parents([9, other(t1)], [-1, 0])
    acc = verify(
        miss, torch.stack([raw_logits(p, "target") for p in node_prefixes(miss)]), SamplingParams(0.0), "greedy"
    )
    assert acc.nodes == (0,) and acc.emitted(miss) == [t1]
