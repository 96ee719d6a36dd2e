"""The cascade drafter: several draft sources under one DyTC router, merged into one tree.

Each step the lookup sources (n-gram, suffix) draft first; the router then picks which model
source (a self-speculative level, Medusa heads, ...) extends the tree and how deep (`dytc`). The
sources' trees are merged into one trie (lookup branches first); every child is a deterministic
pick, so verification is exact under every lossless rule. After the step the speculator reports
what was emitted (`observe_outcome`) and each source's estimate learns from its own tree.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from ..params import ConfigError
from ..policies.base import TreeShape, cap_depth
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, Drafter, DrafterNeeds
from .dytc import DyTCRouter


def merged_needs(sources: Sequence[Drafter]) -> DrafterNeeds:
    """One feature-reading source at most: the runtime feeds one set of target layers."""
    readers = [s for s in sources if s.needs.hidden_states]
    if len({s.needs.hidden_layer_ids for s in readers}) > 1:
        raise ConfigError(
            "cascade: sources " + ", ".join(s.name for s in readers) + " read different target layers; "
            "combine at most one of them"
        )
    if any(s.needs.multimodal for s in sources):
        raise ConfigError("cascade: vision drafters cannot be cascaded yet")
    return readers[0].needs if readers else DrafterNeeds()


class CascadeDrafter:
    name = "cascade"

    def __init__(self, lookup: Mapping[str, Drafter], models: Mapping[str, Drafter], router: DyTCRouter) -> None:
        if not lookup and not models:
            raise ConfigError("cascade: no draft sources were given")
        self.lookup, self.models, self.router = dict(lookup), dict(models), router
        self.needs = merged_needs([*self.lookup.values(), *self.models.values()])
        self.last_trees: dict[str, DraftTree] = {}
        self._drafted_at: float | None = None
        self._last_nodes = 1  # nodes of the tree proposed last (root included)
        self.routed: dict[str, int] = {}  # steps each source drafted in

    def bind_target(self, lm: object) -> None:
        """Hands the runtime's target to the sources that draft with it (self levels)."""
        for source in self.models.values():
            bind = getattr(source, "bind_target", None)
            if bind is not None:
                bind(lm)

    def begin(self) -> None:
        for source in (*self.lookup.values(), *self.models.values()):
            source.begin()
        self._drafted_at = None

    def end(self) -> None:
        for source in (*self.lookup.values(), *self.models.values()):
            if hasattr(source, "end"):
                source.end()

    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        start = time.perf_counter()
        if self._drafted_at is not None:  # the last step's verify and everything around it
            self.router.time_step(start - self._drafted_at, self._last_nodes)
        trees = {name: source.propose(context, shape, params, rng) for name, source in self.lookup.items()}
        route = self.router.route(
            {name: t.max_depth for name, t in trees.items()},
            shape.depth,
            lookup_nodes=sum(t.num_drafted for t in trees.values()),
            width=shape.width,
            budget=shape.budget,
        )
        if route.source is not None:
            began = time.perf_counter()
            tree = self.models[route.source].propose(context, cap_depth(shape, route.depth), params, rng)
            self.router.stats[route.source].time_level((time.perf_counter() - began) / max(1, tree.max_depth))
            trees = {route.source: tree, **trees}
        self.last_trees = trees
        for name in trees:
            self.routed[name] = self.routed.get(name, 0) + 1
        self._drafted_at = time.perf_counter()
        # Surest sources first: a chain keeps only the first; a cut budget keeps their nodes.
        ranked = sorted(trees, key=lambda name: -self.router.stats[name].acceptance)
        chain = shape.width == 1 and shape.paths is None
        return merge_trees(
            int(context.tokens[-1]), [trees[n] for n in ranked if trees[n].num_drafted], shape.budget, chain
        )

    def report(self) -> dict:
        """Per source: acceptance estimate, drafting time per level, steps it drafted."""
        return {
            name: {
                "acceptance": round(stats.acceptance, 4),
                "level_ms": None if stats.level_seconds is None else round(stats.level_seconds * 1e3, 3),
                "routed_steps": self.routed.get(name, 0),
            }
            for name, stats in self.router.stats.items()
        } | {"step_ms_by_tokens": {int(n): round(t * 1e3, 3) for n, t in sorted(self.router.latency.points.values())}}

    def observe_outcome(self, tree: DraftTree, emitted: Sequence[int]) -> None:
        self.router.observe(self.last_trees, emitted)


def merge_trees(root: int, trees: Sequence[DraftTree], max_nodes: int, chain: bool = False) -> DraftTree:
    """One trie of every tree's root-to-leaf token paths, in the order given, cut to `max_nodes`
    drafted nodes; `chain`: the first tree's first path alone."""
    paths: list[list[int]] = []
    for tree in trees[:1] if chain else trees:
        tokens = tree.tokens.tolist()
        paths += [[tokens[i] for i in path[1:]] for path in tree.root_to_leaf_paths() if len(path) > 1]
    return DraftTree.from_token_paths(root, paths[:1] if chain else paths, max_nodes)
