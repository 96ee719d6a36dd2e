"""The drafter protocol: `propose(context, shape, params, rng) -> DraftTree`, plus what it needs.

A drafter keeps its own per-request state (caches); `begin` resets it. The runtime hands it the
whole committed sequence each step (`tokens`, whose last entry is the tree's root) and, for
drafters that declare `needs_hidden_states`, the target's features of every committed position
but the root (`hidden_states[t]` for token t), so a drafter can tell by length what is new.
For requests with images it also hands over `images`: where the image spans lie in the prompt and
the embeddings the target's language model saw there.
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
class ImageInputs:
    """The images of one prompt as the target's language model sees them. Span i covers prompt
    positions spans[i][0] .. spans[i][1] - 1 (placeholder tokens in `tokens`); `embeds` holds the
    rows the target put there, all spans concatenated in order. `saliency`, when the engine can
    give it, scores each image row (the target's attention from the prompt's last position)."""

    spans: tuple[tuple[int, int], ...]
    embeds: torch.Tensor  # [sum of span lengths, H]
    saliency: torch.Tensor | None = None  # [sum of span lengths]

    def __post_init__(self) -> None:
        n = sum(e - s for s, e in self.spans)
        if any(e <= s for s, e in self.spans) or any(b[0] < a[1] for a, b in zip(self.spans, self.spans[1:])):
            raise ValueError(f"image spans {self.spans} must be non-empty, ordered and disjoint")
        if self.embeds.shape[0] != n:
            raise ValueError(f"image spans cover {n} positions but {self.embeds.shape[0]} embedding rows were given")
        if self.saliency is not None and self.saliency.shape != (n,):
            raise ValueError(f"image saliency has shape {tuple(self.saliency.shape)}; expected ({n},)")

    def row_slices(self) -> list[slice]:
        """Per span, its rows in `embeds` (and `saliency`)."""
        out, offset = [], 0
        for s, e in self.spans:
            out.append(slice(offset, offset + e - s))
            offset += e - s
        return out

    @property
    def positions(self) -> torch.Tensor:
        """The prompt positions of all image rows, in `embeds` order."""
        return torch.cat([torch.arange(s, e) for s, e in self.spans])


@dataclass(frozen=True)
class DraftContext:
    tokens: torch.Tensor  # [L + 1] committed tokens; tokens[-1] is the root
    hidden_states: torch.Tensor | None = None  # [L, F] target features, present when needed
    images: ImageInputs | None = None  # the prompt's images, when it has any


class Drafter(Protocol):
    name: str
    needs: DrafterNeeds

    def begin(self) -> None:
        """Forget all per-request state."""

    # Optional: `end()`, called when the request is over (the speculator's `retain`), for drafters
    # that keep what a request leaves behind for later ones.

    def propose(
        self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource
    ) -> DraftTree: ...
