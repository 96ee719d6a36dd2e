"""Exact (lossless) rejection sampling over chains and trees.

At each accepted node with residual target distribution p:
- children chosen deterministically (top-k, lookup): q is one-hot on each child in turn; accept
  child x with probability p(x); on rejection set p(x) = 0 and renormalise.
- children drawn i.i.d. from q (SpecInfer; a chain is the one-child case): accept x with
  probability min(1, p(x)/q(x)); on rejection p <- norm(max(0, p - q)).
When no child is accepted the bonus token is drawn from the residual; when a leaf is accepted it
is drawn from that leaf's target distribution. Both p and q are processed by the same
`process_logits` parameters (the drafter applies them to q before sampling).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..params import reject_unknown
from ..random_source import RandomSource
from ..sampling import SamplingParams, process_logits
from ..tree import DraftTree
from .registry import Accepted, register_rule


def _normalise(p: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = p.sum()
    # Zero mass left only through rounding: the rejected tokens carried all of it.
    return p / total if total > 0 else fallback


def sampling_walk(
    tree: DraftTree,
    target_logits: torch.Tensor,
    params: SamplingParams,
    rng: RandomSource,
    extra: Callable[[int, int], bool] | None = None,
) -> Accepted:
    """Exact rejection sampling; with `extra`, a child the test rejects is still followed when
    extra(node, child) is true (lossy). `extra` draws no randomness, so with it never true the walk
    consumes the same random stream and returns what the lossless rule returns."""
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        p = process_logits(target_logits[node], params)
        original = p
        kids = tree.children(node)
        nxt = None
        if tree.sampled_children and kids:
            assert tree.draft_probs is not None  # DraftTree: sampled_children needs draft_probs
            q = tree.draft_probs[node].to(p.dtype)
            for c in kids:
                x = tokens[c]
                qx = float(q[x])
                if (qx > 0 and rng.accept(min(1.0, float(p[x]) / qx))) or (extra is not None and extra(node, c)):
                    nxt = c
                    break
                p = _normalise(torch.clamp(p - q, min=0.0), original)
        else:
            for c in kids:
                x = tokens[c]
                if rng.accept(float(p[x])) or (extra is not None and extra(node, c)):
                    nxt = c
                    break
                p = p.clone()
                p[x] = 0.0
                p = _normalise(p, original)
        if nxt is None:
            return Accepted(tuple(path), rng.choice(p))
        node = nxt
        path.append(node)


@register_rule("sampling")
def verify_tree_sampling(
    tree: DraftTree, target_logits: torch.Tensor, params: SamplingParams, rng: RandomSource, **options: object
) -> Accepted:
    reject_unknown("acceptance rule 'sampling'", options, ())
    return sampling_walk(tree, target_logits, params, rng)
