"""EAGLE-2 dynamic trees: expand the top-`width` frontier by top-`width` children for `depth`
levels, then keep the `budget` best candidates by path probability (the drafter does the
expansion; this policy fixes its three numbers)."""

from __future__ import annotations

from ..params import check_int, reject_unknown
from .base import DecodeState, StepStats, TreeShape


class DynamicPolicy:
    name = "dynamic"
    reads_entropy = False

    def __init__(self, depth: int = 5, width: int = 4, budget: int = 16, **options: object) -> None:
        reject_unknown("policy 'dynamic'", options, ())
        self.shape = TreeShape(
            depth=check_int("policy 'dynamic'", "depth", depth, 1, 64),
            width=check_int("policy 'dynamic'", "width", width, 1, 64),
            budget=check_int("policy 'dynamic'", "budget", budget, 1, 1024),
        )

    def plan(self, state: DecodeState) -> TreeShape:
        return self.shape

    def observe(self, stats: StepStats) -> None:
        pass
