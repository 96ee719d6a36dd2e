"""A chain of fixed depth: one draft token per level."""

from __future__ import annotations

from ..params import check_int, reject_unknown
from .base import DecodeState, StepStats, TreeShape


class ChainPolicy:
    name = "chain"
    reads_entropy = False

    def __init__(self, depth: int = 5, **options: object) -> None:
        reject_unknown("policy 'chain'", options, ("depth", "budget"))
        budget = options.get("budget")
        if budget is not None:  # a chain's budget is its depth
            depth = check_int("policy 'chain'", "budget", budget, 1, 64)
        self.depth = check_int("policy 'chain'", "depth", depth, 1, 64)

    def plan(self, state: DecodeState) -> TreeShape:
        return TreeShape(depth=self.depth, width=1, budget=self.depth)

    def observe(self, stats: StepStats) -> None:
        pass
