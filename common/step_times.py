"""Wall-clock time a speculative step spends in each of its parts, summed across steps.

Runtimes wrap their parts (`with times("drafting"): ...`) and count `steps` (every decode step the
speculator ran in, with or without a tree) and `tree_steps` (those that verified a tree or chain); a
benchmark reads `totals()` before and after a run and divides by `steps`, so time spent on steps that
found no draft is not charged to the steps that did. Sections may repeat within a step (one attention
call per layer); each call adds to its section.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

SECTIONS = ("drafting", "tree_attention", "verification", "bookkeeping")


class StepTimes:
    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)
        self.steps = 0  # decode steps the speculator ran in
        self.tree_steps = 0  # of those, steps that verified at least one tree (chains included)

    @contextmanager
    def __call__(self, section: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[section] += time.perf_counter() - start

    def totals(self) -> dict[str, float]:
        """Seconds per section so far, plus `steps` and `tree_steps`."""
        return {
            **{s: self._seconds.get(s, 0.0) for s in SECTIONS},
            **{s: v for s, v in self._seconds.items() if s not in SECTIONS},
            "steps": self.steps,
            "tree_steps": self.tree_steps,
        }
