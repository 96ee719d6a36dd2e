"""What a tree policy decides (TreeShape) and what it learns from (StepStats)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..params import ConfigError


@dataclass(frozen=True)
class TreeShape:
    """depth: most draft levels; width: children per expanded node and frontier size (top-k);
    budget: most drafted nodes (root excluded). `paths`, when set, fixes the topology as sibling
    ranks from the root (static trees); depth/width/budget then describe that topology."""

    depth: int
    width: int
    budget: int
    paths: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.depth < 1 or self.width < 1 or self.budget < 1:
            raise ConfigError(f"TreeShape needs depth, width, budget >= 1; got {self}")


@dataclass(frozen=True)
class DecodeState:
    """What a policy may read when it plans a step (per request). `budget`: the most nodes cost-aware
    sizing gives the request this step (None: the policy's own budget)."""

    step: int = 0
    context_len: int = 0
    budget: int | None = None


@dataclass(frozen=True)
class StepStats:
    """What happened in one verify step."""

    shape: TreeShape | None  # None for the prompt's prefill (no tree)
    num_nodes: int  # drafted nodes actually proposed
    accepted: int  # drafted tokens accepted (bonus excluded)
    target_entropy: float  # nats, target distribution at the last accepted position


def cap_shape(shape: TreeShape, budget: int) -> TreeShape:
    """The shape within `budget` nodes: a static topology keeps its first nodes (parents first)."""
    if shape.budget <= budget:
        return shape
    if shape.paths is not None:
        paths = shape.paths[:budget]
        return TreeShape(
            depth=max(len(p) for p in paths), width=min(shape.width, budget), budget=len(paths), paths=paths
        )
    return TreeShape(depth=min(shape.depth, budget), width=min(shape.width, budget), budget=budget)


def cap_depth(shape: TreeShape, depth: int) -> TreeShape:
    """The shape no deeper than `depth` levels (a static topology keeps its paths that fit)."""
    if shape.depth <= depth:
        return shape
    if shape.paths is not None:
        paths = tuple(p for p in shape.paths if len(p) <= depth)
        return TreeShape(depth=depth, width=shape.width, budget=len(paths), paths=paths)
    return TreeShape(depth=depth, width=shape.width, budget=shape.budget)


class TreePolicy(Protocol):
    name: str
    reads_entropy: bool  # whether observe() reads StepStats.target_entropy (else it may be NaN)

    def plan(self, state: DecodeState) -> TreeShape: ...

    def observe(self, stats: StepStats) -> None: ...


def normalise_paths(owner: str, paths: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    """Rank paths must be prefix-closed (a node's parent path is listed) and unique."""
    out = tuple(tuple(int(r) for r in p) for p in paths)
    seen = set(out)
    if not out:
        raise ConfigError(f"{owner}: paths must list at least one node")
    if len(seen) != len(out):
        raise ConfigError(f"{owner}: paths contain duplicates")
    for p in out:
        if not p or any(r < 0 for r in p):
            raise ConfigError(f"{owner}: path {list(p)} must be a non-empty list of ranks >= 0")
        if len(p) > 1 and p[:-1] not in seen:
            raise ConfigError(f"{owner}: path {list(p)} has no parent path {list(p[:-1])}")
    return tuple(sorted(out, key=lambda p: (len(p), p)))
