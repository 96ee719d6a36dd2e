"""Where verification and drafting draw their randomness.

Rules call only `accept(prob)` and `choice(probs)`, so a test can swap in a source that enumerates
every outcome with its probability and compute a rule's output distribution exactly.
"""

from __future__ import annotations

from typing import Protocol

import torch


class RandomSource(Protocol):
    def accept(self, prob: float) -> bool:
        """True with probability `prob` (clamped to [0, 1])."""

    def choice(self, probs: torch.Tensor) -> int:
        """An index drawn from the (normalised) 1-D distribution `probs`."""


class TorchRandom:
    def __init__(self, seed: int | None = None, generator: torch.Generator | None = None) -> None:
        self.generator = generator or torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)

    def accept(self, prob: float) -> bool:
        if prob >= 1.0:
            return True
        if prob <= 0.0:
            return False
        return bool(torch.rand((), generator=self.generator).item() < prob)

    def choice(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs.float().cpu(), 1, generator=self.generator).item())
