"""`FeatureStore`: target features that ended requests leave behind, found again by their tokens.

An engine's prefix cache serves a later request's prompt positions without running the target on
them, so a drafter that reads target features would see nothing there (the second turn of a
conversation re-sends the first turn and its answer). A position's features are a function of the
tokens up to and including it, so the rows of any stored sequence that shares those tokens are the
features the target would have computed there (up to the batch's rounding).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import torch

DEFAULT_CAPACITY = 16384  # positions kept; SmolLM2's EAGLE features are 6.9 KB a position in fp32


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading tokens a and b share."""
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differs = (a[:n] != b[:n]).nonzero()
    return n if differs.numel() == 0 else int(differs[0])


class FeatureStore:
    """Sequences of (tokens, features) with features[p] the target's features at position p of
    tokens, least recently used dropped first beyond `capacity` positions in all."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError(f"FeatureStore capacity {capacity}: give 0 (keep nothing) or more positions")
        self.capacity = capacity
        self.entries: OrderedDict[int, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self.positions = 0
        self.next_key = 0
        self.hits = self.served = 0  # lookups that found rows, and rows they gave

    def put(self, tokens: torch.Tensor, features: torch.Tensor) -> None:
        """Keep `features` (one row a position from 0) of the sequence `tokens` (at least as long)."""
        n = features.shape[0]
        if n == 0 or n > self.capacity:
            return
        tokens = tokens[:n].to(torch.int64).clone()
        for key, (kept, kept_rows) in list(self.entries.items()):  # sequences this one extends go
            if kept_rows.shape[0] <= n and common_prefix(kept, tokens) >= kept_rows.shape[0]:
                self._drop(key)
        self.entries[self.next_key] = (tokens, features.clone())
        self.next_key += 1
        self.positions += n
        while self.positions > self.capacity:
            self._drop(next(iter(self.entries)))

    def rows(
        self, tokens: torch.Tensor, start: int, stop: int, also: Iterable[tuple[torch.Tensor, torch.Tensor]] = ()
    ) -> torch.Tensor | None:
        """The features of positions start, start+1, ... of `tokens` (as many as one sequence shares,
        at most up to stop) from the stored sequences or those in `also` (requests still running),
        or None when no sequence shares position `start`."""
        best_key, best, best_rows = None, start, None
        candidates: list[tuple[int | None, torch.Tensor, torch.Tensor]]
        candidates = [(key, kept, rows) for key, (kept, rows) in self.entries.items()]
        candidates += [(None, kept, rows) for kept, rows in also]
        for key, kept, kept_rows in candidates:
            reach = min(common_prefix(kept, tokens[:stop]), kept_rows.shape[0], stop)
            if reach > best:
                best_key, best, best_rows = key, reach, kept_rows
        if best_rows is None:
            return None
        if best_key is not None:
            self.entries.move_to_end(best_key)
        self.hits += 1
        self.served += best - start
        return best_rows[start:best]

    def _drop(self, key: int) -> None:
        self.positions -= self.entries.pop(key)[1].shape[0]
