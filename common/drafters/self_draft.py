"""Self-speculative drafts: the target itself with a set of layers skipped (no second model).

The target's cache holds the committed tokens (all layers) between steps. A draft runs the root
and the tree's nodes through the kept layers only, appending their KV after the committed entries
of those layers (skipped layers get none), then truncates every layer back: the verify forward
rewrites the same slots with all layers. Layer 0 is always kept: the cache's length is read there.

A level is a skip set with its calibrated agreement (how often the skipping model's next token is
the full model's) and cost (its forward's time over the full forward's), both measured at startup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ..params import ConfigError
from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds
from .draft_model import LMScorer
from .expansion import grow_tree
from .tree_lm import ScratchTree, causal_extension_mask

DEFAULT_FRACTIONS = (0.25, 0.375, 0.5)  # shares of the layers a level skips
MAX_CHAIN = 8  # longest chain a level's value is judged over


class LayerSkipLM(Protocol):
    """The target's TreeLM with a forward that runs only the layers not in `skip`."""

    vocab_size: int
    num_layers: int

    @property
    def length(self) -> int: ...

    def forward_skipping(
        self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, skip: frozenset[int]
    ) -> torch.Tensor: ...

    def truncate(self, length: int) -> None: ...


def check_skip(skip: Iterable[int], num_layers: int, owner: str = "self drafter") -> frozenset[int]:
    """A valid skip set: layer ids in 1 .. num_layers - 1 (layer 0 always runs, so one layer is kept)."""
    out = frozenset(int(i) for i in skip)
    bad = sorted(i for i in out if not 1 <= i < num_layers)
    if bad:
        raise ConfigError(
            f"{owner}: skip layers {bad} are not in 1..{num_layers - 1} (layer 0 always runs; the target has "
            f"{num_layers} layers)"
        )
    return out


def check_fractions(fractions: Sequence[float], owner: str = "self drafter") -> tuple[float, ...]:
    out = tuple(float(f) for f in fractions)
    bad = [f for f in out if not 0.0 < f < 1.0]
    if not out or bad:
        raise ConfigError(f"{owner}: levels {list(fractions)} must be shares of layers to skip, each in (0, 1)")
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class SelfLevel:
    skip: frozenset[int]
    agreement: float  # share of positions where the skipping model's argmax is the full model's
    cost: float  # its forward's time over the full forward's

    @property
    def name(self) -> str:
        return f"self-{len(self.skip)}"

    def value(self) -> float:
        """Tokens per target-forward time of its best chain (acceptance = agreement): the measure
        levels are ranked by."""
        return max(chain_tokens(self.agreement, n) / (n * self.cost + 1.0) for n in range(1, MAX_CHAIN + 1))


def chain_tokens(acceptance: float, length: int) -> float:
    """Expected tokens a verify step emits for a chain of `length` drafts, each accepted with
    `acceptance` given its parent was (the bonus included)."""
    return sum(acceptance**i for i in range(length + 1))


def calibrate_levels(
    num_layers: int,
    agreement: Callable[[frozenset[int]], float],
    cost: Callable[[frozenset[int]], float],
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    progress: Callable[[Iterable[int]], Iterable[int]] = lambda it: it,
) -> list[SelfLevel]:
    """One level per fraction: each layer's importance is the agreement lost when it alone is
    skipped; a level skips the least important round(fraction * layers) layers (never layer 0 nor
    the last). Each level's agreement and cost are then measured as a whole."""
    fractions = check_fractions(fractions)
    candidates = list(range(1, num_layers - 1))
    if not candidates:
        raise ConfigError(f"self drafter: a target with {num_layers} layers has none to skip (first and last stay)")
    alone = {i: agreement(frozenset([i])) for i in progress(candidates)}
    ranked = sorted(candidates, key=lambda i: (-alone[i], i))
    levels: list[SelfLevel] = []
    for f in fractions:
        n = min(len(candidates), max(1, round(f * num_layers)))
        skip = frozenset(ranked[:n])
        if any(level.skip == skip for level in levels):
            continue
        levels.append(SelfLevel(skip, agreement(skip), cost(skip)))
    return levels


class SkipView:
    """The LayerSkipLM as a plain TreeLM that always skips `skip` (for the tree growth)."""

    def __init__(self, lm: LayerSkipLM, skip: frozenset[int]) -> None:
        self.lm, self.skip, self.vocab_size = lm, skip, lm.vocab_size

    @property
    def length(self) -> int:
        return self.lm.length

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.lm.forward_skipping(tokens, positions, mask, self.skip)

    def truncate(self, length: int) -> None:
        self.lm.truncate(length)


class SelfDrafter:
    """Drafts with the target at one level (the most valuable of `levels`; `level` may be changed
    between steps). `bind_target` gives it the target's LayerSkipLM, the one the runtime verifies with."""

    name = "self"
    needs = DrafterNeeds()

    def __init__(
        self, levels: Sequence[SelfLevel], num_layers: int, sample_children: bool = False, lm: LayerSkipLM | None = None
    ) -> None:
        if not levels:
            raise ConfigError("self drafter: no levels were given")
        for level in levels:
            check_skip(level.skip, num_layers)
        self.levels, self.num_layers, self.sample_children = list(levels), num_layers, sample_children
        self.level = max(self.levels, key=SelfLevel.value)
        self.lm: LayerSkipLM | None = None
        if lm is not None:
            self.bind_target(lm)

    def bind_target(self, lm: LayerSkipLM) -> None:
        if lm.num_layers != self.num_layers:
            raise ConfigError(
                f"self drafter: levels were calibrated for {self.num_layers} layers; the target has {lm.num_layers}"
            )
        self.lm = lm

    def begin(self) -> None:
        """The target owns the cache: nothing to reset."""

    @torch.no_grad()
    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        lm = self.lm
        if lm is None:
            raise ValueError("self drafter: no target bound (bind_target) before drafting")
        tokens = context.tokens
        committed = tokens.numel() - 1
        if lm.length != committed:
            raise ValueError(
                f"self drafter: the target's cache holds {lm.length} tokens; the draft needs the "
                f"{committed} committed ones"
            )
        view = SkipView(lm, self.level.skip)
        root = tokens[-1:]
        logits = view.forward(root, torch.tensor([committed]), causal_extension_mask(committed, 1))
        try:
            scorer = LMScorer(view, ScratchTree(committed + 1))
            return grow_tree(int(root), logits[-1], scorer, shape, params, rng, self.sample_children)
        finally:
            lm.truncate(committed)
