"""The contract a drafting language model offers (the runtime wraps an HF model in it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class TreeLM(Protocol):
    """A causal LM with a KV cache that accepts arbitrary attention masks.

    `forward` appends the KV of `tokens` after the `length` cached entries; row i of `mask`
    ([q, length + q] bool) says what token i attends to. `truncate(n)` keeps the first n entries."""

    vocab_size: int

    @property
    def length(self) -> int: ...

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor: ...

    def truncate(self, length: int) -> None: ...


def causal_extension_mask(cached: int, new: int) -> torch.Tensor:
    """[new, cached + new]: new tokens see the whole cache and each other causally."""
    mask = torch.ones(new, cached + new, dtype=torch.bool)
    mask[:, cached:] = torch.tril(torch.ones(new, new, dtype=torch.bool))
    return mask


class ScratchTree:
    """Bookkeeping for drafted nodes appended after a committed cache of `base` entries (node 0,
    the root, is the last committed entry). Builds each new node's mask row and position."""

    def __init__(self, base: int, root_position: int | None = None) -> None:
        self.base = base
        self.root_position = base - 1 if root_position is None else root_position
        self.slot: dict[int, int] = {0: base - 1}
        self.parent: dict[int, int] = {0: -1}
        self.cached = base

    def add(
        self, nodes: Sequence[int], parents: Sequence[int], depths: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # New nodes occupy slots cached, cached + 1, ... in the order given.
        for j, (node, par) in enumerate(zip(nodes, parents)):
            self.parent[node] = par
            self.slot[node] = self.cached + j
        q = len(nodes)
        mask = torch.zeros(q, self.cached + q, dtype=torch.bool)
        mask[:, : self.base] = True
        for j, node in enumerate(nodes):
            a = node
            while a > 0:
                mask[j, self.slot[a]] = True
                a = self.parent[a]
        positions = torch.tensor([self.root_position + d for d in depths], dtype=torch.long)
        self.cached += q
        return mask, positions
