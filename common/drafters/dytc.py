"""DyTC routing (after CAS-Spec's Dynamic Tree Cascade): per step, which draft source extends the
tree and how deep, from online acceptance estimates and measured costs.

Per source the router keeps a per-token acceptance rate (a Beta estimate: accepted drafts over
accepted drafts plus first rejections, seeded by a prior such as a self level's calibrated
agreement) and its drafting time per tree level; per request stream it measures the step's time
outside drafting (the verify forward and the engine around it). Lookup sources cost almost
nothing and always draft; among model sources it picks the one and the depth n that maximise

    expected tokens of the merged tree / (step time + n * level time),

where a branch of depth n with rate a reaches depth k with probability a**k and the merged tree's
tokens are 1 + sum_k P(some branch reaches k), and the step time is a latency model (the sizing
one: piecewise linear in the tokens the target verifies) fed with the measured step times and tree
sizes, so a wider or deeper tree is charged what verifying it costs. Depth 0 (lookup only) is one of
the choices. A source left unpicked for EXPLORE_EVERY steps is picked once, so its estimate keeps up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..sizing.latency import LatencyModel
from ..tree import DraftTree

EXPLORE_EVERY = 32
EMA = 0.2  # weight of a new time measurement
PRIOR_WEIGHT = 8.0  # pseudo-trials behind a source's prior acceptance


@dataclass
class SourceStats:
    prior: float  # acceptance before any outcome
    accepted: float = 0.0
    trials: float = 0.0
    level_seconds: float | None = None  # drafting time per tree level (model sources)
    idle_steps: int = 0  # steps since it last drafted

    @property
    def acceptance(self) -> float:
        return (self.accepted + PRIOR_WEIGHT * self.prior) / (self.trials + PRIOR_WEIGHT)

    def time_level(self, seconds: float) -> None:
        self.level_seconds = seconds if self.level_seconds is None else (1 - EMA) * self.level_seconds + EMA * seconds


def reach(acceptances: Sequence[float], depths: Sequence[int]) -> float:
    """Expected tokens a step emits when independent branches, branch i `depths[i]` deep with rate
    `acceptances[i]`, hang off the root (the bonus included)."""
    deepest = max(depths, default=0)
    total = 1.0
    for k in range(1, deepest + 1):
        miss = 1.0
        for a, d in zip(acceptances, depths):
            if k <= d:
                miss *= 1.0 - a**k
        total += 1.0 - miss
    return total


def accepted_depth(tree: DraftTree, emitted: Sequence[int]) -> tuple[int, bool]:
    """(how many of `emitted` are a path of `tree` from its root; whether the tree drafted a child
    where that path stops, i.e. a draft was rejected there)."""
    node, depth = 0, 0
    for token in emitted:
        child = next((c for c in tree.children(node) if int(tree.tokens[c]) == int(token)), None)
        if child is None:
            break
        node, depth = child, depth + 1
    return depth, bool(tree.children(node))


@dataclass
class Route:
    source: str | None  # the model source that drafts this step (None: lookup only)
    depth: int
    expected_tokens: float
    expected_seconds: float


@dataclass
class DyTCRouter:
    """`lookup` and `models` name the sources; `priors` their starting acceptance (default 0.5)."""

    lookup: tuple[str, ...]
    models: tuple[str, ...]
    priors: dict[str, float] = field(default_factory=dict)
    latency: LatencyModel = field(default_factory=LatencyModel)  # the step outside drafting, by tree size
    stats: dict[str, SourceStats] = field(init=False)

    def __post_init__(self) -> None:
        self.stats = {name: SourceStats(self.priors.get(name, 0.5)) for name in (*self.lookup, *self.models)}

    def time_step(self, seconds: float, tokens: int) -> None:
        """The last step verified a tree of `tokens` nodes (root included) and spent `seconds` outside drafting."""
        self.latency.observe_step(tokens, seconds)

    def route(
        self, lookup_depths: dict[str, int], max_depth: int, lookup_nodes: int = 0, width: int = 1, budget: int = 1
    ) -> Route:
        """The model source and depth for this step, given how deep each lookup source drafted and
        how many nodes they hold together; a model source of depth n adds min(budget, n * width)."""
        rates = [self.stats[s].acceptance for s in lookup_depths]
        depths = list(lookup_depths.values())
        measured = self.latency.samples > 0

        def step_seconds(nodes: int) -> float:
            return float(self.latency.step(1 + nodes, trees=False))

        best = Route(None, 0, reach(rates, depths), step_seconds(lookup_nodes) if measured else 0.0)
        for stats in (self.stats[name] for name in self.models):
            stats.idle_steps += 1
        for name in self.models:
            stats = self.stats[name]
            if stats.level_seconds is None or stats.idle_steps > EXPLORE_EVERY:
                stats.idle_steps = 0
                return Route(name, max(1, min(2, max_depth)), float("nan"), float("nan"))
        if not measured:
            return best
        for name in self.models:
            stats = self.stats[name]
            assert stats.level_seconds is not None  # every model source was timed above
            for n in range(1, max_depth + 1):
                tokens = reach([*rates, stats.acceptance], [*depths, n])
                seconds = step_seconds(lookup_nodes + min(budget, n * width)) + n * stats.level_seconds
                if tokens / seconds > best.expected_tokens / best.expected_seconds:
                    best = Route(name, n, tokens, seconds)
        if best.source is not None:
            self.stats[best.source].idle_steps = 0
        return best

    def observe(self, trees: dict[str, DraftTree], emitted: Sequence[int]) -> None:
        """Each source's own tree from the step and the tokens the step emitted."""
        for name, tree in trees.items():
            if tree.num_drafted == 0:
                continue
            depth, rejected = accepted_depth(tree, emitted)
            stats = self.stats[name]
            stats.accepted += depth
            stats.trials += depth + int(rejected)
