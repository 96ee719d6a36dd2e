"""Greedy tree verification: follow the child equal to the target's argmax; emit the argmax where
no child matches. Output equals plain greedy decoding token for token.

`greedy_walk(..., extra=f)` is the lossy extension: where no child matches, the first child with
f(node, child) true is followed instead. With f never true it is exactly the lossless walk."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..params import reject_unknown
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .registry import Accepted, register_rule


def greedy_walk(
    tree: DraftTree, target_logits: torch.Tensor, extra: Callable[[int, int], bool] | None = None
) -> Accepted:
    return greedy_walk_argmax(tree, target_logits.argmax(-1).tolist(), extra)


def greedy_walk_argmax(tree: DraftTree, best: list[int], extra: Callable[[int, int], bool] | None = None) -> Accepted:
    """The walk from the target's argmax token at each node (`best[i]` for node i)."""
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        kids = tree.children(node)
        nxt = next((c for c in kids if tokens[c] == best[node]), None)
        if nxt is None and extra is not None:
            nxt = next((c for c in kids if extra(node, c)), None)
        if nxt is None:
            return Accepted(tuple(path), best[node])
        node = nxt
        path.append(node)


@register_rule("greedy")
def verify_tree_greedy(
    tree: DraftTree, target_logits: torch.Tensor, params: SamplingParams, rng: RandomSource, **options: object
) -> Accepted:
    reject_unknown("acceptance rule 'greedy'", options, ())
    return greedy_walk(tree, target_logits)
