"""Drafting many requests with one head pass per round gives each request the tree it gets alone."""

import copy

import pytest
import torch
from tiny_models import tiny_llama

from sagespec.common.drafters import EagleDrafter, EagleHead, EagleHeadConfig
from sagespec.common.drafters.base import DraftContext
from sagespec.common.drafters.eagle import run_drafting
from sagespec.common.policies import TreeShape
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams

SHAPES = [
    TreeShape(depth=4, width=3, budget=8),
    TreeShape(depth=3, width=1, budget=3),
    TreeShape(depth=2, width=2, budget=4, paths=((0,), (1,), (0, 0), (0, 1))),
    TreeShape(depth=1, width=2, budget=2),
]
PARAMS = [
    SamplingParams(),
    SamplingParams(),
    SamplingParams(temperature=0.8, top_k=20),
    SamplingParams(temperature=1.0),
]


@pytest.fixture(scope="module", params=[None, 40], ids=["target-vocab", "reduced-vocab"])
def head(request):
    target = tiny_llama(seed=0)
    cfg = EagleHeadConfig.for_target(target.config, target_layer_ids=(0, 1, 2), draft_vocab_size=request.param)
    head = EagleHead.random(cfg, target.model.embed_tokens.weight, target.lm_head.weight, seed=3).eval()
    if request.param is not None:  # a draft vocabulary that is not the target's first ids
        head.d2t.copy_(
            torch.randperm(cfg.vocab_size, generator=torch.Generator().manual_seed(1))[: request.param].sort().values
        )
    return head


def contexts(head, step: int):
    g = torch.Generator().manual_seed(7)
    out = []
    for length in (5, 12, 9, 17):
        n = length + 3 * step
        tokens = torch.randint(0, head.config.vocab_size, (n,), generator=g)
        feats = torch.randn(n - 1, head.fc.in_features, generator=g)
        out.append(DraftContext(tokens, feats))
    return out


def assert_same_tree(a, b):
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.parents.tolist() == b.parents.tolist()
    assert a.sampled_children == b.sampled_children
    torch.testing.assert_close(a.draft_probs, b.draft_probs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("sample_children", [False, True])
def test_lockstep_drafting_equals_one_request_at_a_time(head, sample_children):
    alone = [EagleDrafter(copy.copy(head), sample_children) for _ in SHAPES]
    together = [EagleDrafter(copy.copy(head), sample_children) for _ in SHAPES]
    for d in alone + together:
        d.begin()
    for step in range(2):  # the second step reuses each request's cache
        ctxs = contexts(head, step)
        expected = [
            d.propose(c, s, p, TorchRandom(i)) for i, (d, c, s, p) in enumerate(zip(alone, ctxs, SHAPES, PARAMS))
        ]
        got = run_drafting(
            [d.drafting(c, s, p, TorchRandom(i)) for i, (d, c, s, p) in enumerate(zip(together, ctxs, SHAPES, PARAMS))]
        )
        for e, t in zip(expected, got):
            assert_same_tree(e, t)
        for a, t in zip(alone, together):
            torch.testing.assert_close(a.head.k_cache, t.head.k_cache, atol=1e-5, rtol=1e-4)


def test_drafted_tokens_lie_in_the_draft_vocabulary(head):
    drafter = EagleDrafter(copy.copy(head))
    drafter.begin()
    tree = drafter.propose(contexts(head, 0)[1], SHAPES[0], SamplingParams(), TorchRandom(0))
    assert tree.num_nodes > 1
    if head.draft_token_ids is not None:
        allowed = set(head.draft_token_ids.tolist())
        assert set(tree.tokens[1:].tolist()) <= allowed
        outside = torch.ones(head.config.vocab_size, dtype=torch.bool)
        outside[head.draft_token_ids] = False
        assert float(tree.draft_probs[:, outside].abs().sum()) == 0.0


def test_calls_with_other_weights_are_refused(head):
    other = EagleHead.random(head.config, head._embed, head._target_lm_head, seed=9)
    ctx = contexts(head, 0)
    a, b = EagleDrafter(copy.copy(head)), EagleDrafter(other)
    with pytest.raises(ValueError, match="same head weights"):
        run_drafting(
            [
                a.drafting(ctx[0], SHAPES[0], PARAMS[0], TorchRandom(0)),
                b.drafting(ctx[1], SHAPES[0], PARAMS[0], TorchRandom(0)),
            ]
        )
