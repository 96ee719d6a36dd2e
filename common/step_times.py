"""Wall-clock time a speculative step spends in each of its parts, summed across steps.

Runtimes wrap their parts (`with times("drafting"): ...`); a benchmark reads `totals()` before and
after a run and divides by the steps it counted. Sections may repeat within a step (one attention
call per layer); each call adds to its section.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

SECTIONS = ("drafting", "tree_attention", "verification", "bookkeeping")


class StepTimes:
    def __init__(self):
        self._seconds: dict[str, float] = defaultdict(float)
        self.steps = 0   # verify steps that ran with at least one tree (chains included)

    @contextmanager
    def __call__(self, section: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[section] += time.perf_counter() - start

    def totals(self) -> dict[str, float]:
        """Seconds per section so far, plus `steps`."""
        return {**{s: self._seconds.get(s, 0.0) for s in SECTIONS}, **{
            s: v for s, v in self._seconds.items() if s not in SECTIONS}, "steps": self.steps}
