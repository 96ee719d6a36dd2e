"""Our draft trees in the layout SGLang verifies: per request, `num_draft_tokens` node tokens
(node 0 the root, the last verified token) and an n x n mask with mask[i, j] true when node j is
node i or one of its ancestors (the NGRAM worker's convention; SGLang derives positions and the
first-child/next-sibling links from it).

A tree smaller than the verify width is padded with detached nodes: each pad sees only itself, so
it has no parent, no tree walk reaches it, and its position is the root's; its row of logits is
computed and never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sagespec.common.tree import DraftTree


@dataclass(frozen=True)
class VerifyLayout:
    tokens: torch.Tensor  # [bs, n] int64
    mask: torch.Tensor  # [bs, n, n] bool
    num_nodes: list[int]  # real nodes per request; the rest are padding


def pack_trees(trees: Sequence[DraftTree], num_draft_tokens: int) -> VerifyLayout:
    n = num_draft_tokens
    too_big = [t.num_nodes for t in trees if t.num_nodes > n]
    if too_big:
        raise ValueError(f"a tree of {max(too_big)} nodes does not fit a verify of {n} tokens")
    tokens = torch.empty(len(trees), n, dtype=torch.long)
    mask = torch.eye(n, dtype=torch.bool).repeat(len(trees), 1, 1)
    for b, tree in enumerate(trees):
        k = tree.num_nodes
        tokens[b, :k] = tree.tokens
        tokens[b, k:] = tree.tokens[0]
        mask[b, :k, :k] = tree.ancestor_mask()
    return VerifyLayout(tokens, mask, [t.num_nodes for t in trees])
