"""A fixed tree (EAGLE-1 / Medusa style), given as sibling-rank paths from the root."""

from __future__ import annotations

from collections.abc import Iterable

from ..params import check_int, reject_unknown
from .base import DecodeState, StepStats, TreeShape, normalise_paths

# 16 nodes: a deep main line with shrinking side branches.
DEFAULT_PATHS = (
    (0,),
    (1,),
    (2,),
    (3,),
    (0, 0),
    (0, 1),
    (0, 2),
    (1, 0),
    (1, 1),
    (2, 0),
    (0, 0, 0),
    (0, 0, 1),
    (0, 1, 0),
    (1, 0, 0),
    (0, 0, 0, 0),
    (0, 0, 0, 0, 0),
)


class StaticPolicy:
    name = "static"
    reads_entropy = False

    def __init__(
        self, paths: Iterable[Iterable[int]] = DEFAULT_PATHS, budget: int | None = None, **options: object
    ) -> None:
        reject_unknown("policy 'static'", options, ())
        ranks = normalise_paths("policy 'static'", paths)
        if budget is not None:  # keep the first `budget` nodes in breadth-first rank order
            check_int("policy 'static'", "budget", budget, 1, 1024)
            ranks = ranks[:budget]
        self.paths = ranks
        self.shape = TreeShape(
            depth=max(len(p) for p in ranks), width=max(p[-1] for p in ranks) + 1, budget=len(ranks), paths=ranks
        )

    def plan(self, state: DecodeState) -> TreeShape:
        return self.shape

    def observe(self, stats: StepStats) -> None:
        pass
