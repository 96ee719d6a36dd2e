"""The drafter protocol: `propose(context, shape, params, rng) -> DraftTree`, plus what it needs.

A drafter keeps its own per-request state (caches); `begin` resets it. The runtime hands it the
whole committed sequence each step (`tokens`, whose last entry is the tree's root) and, for
drafters that declare `needs_hidden_states`, the target's features of every committed position
but the root (`hidden_states[t]` for token t), so a drafter can tell by length what is new.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree


@dataclass(frozen=True)
class DrafterNeeds:
    """What a drafter needs from the engine; a plugin refuses drafters it cannot feed."""
    hidden_states: bool = False
    hidden_layer_ids: tuple[int, ...] = ()  # indices into the target's hidden-state outputs
    multimodal: bool = False


@dataclass(frozen=True)
class DraftContext:
    tokens: torch.Tensor                       # [L + 1] committed tokens; tokens[-1] is the root
    hidden_states: torch.Tensor | None = None  # [L, F] target features, present when needed


class Drafter(Protocol):
    name: str
    needs: DrafterNeeds

    def begin(self) -> None:
        """Forget all per-request state."""

    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams,
                rng: RandomSource) -> DraftTree: ...
