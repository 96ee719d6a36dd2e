"""`Sizer`: every step, how many of the drafted nodes each request's tree keeps, chosen for the whole
batch to maximise expected emitted tokens per second; and each request's next drafting budget.

    rate(k) = (decoding requests + expected accepted tokens of the k best nodes)
              / (step(base tokens + k, trees=k > 0) + drafting time if k > 0)
Nodes are taken best value first across the batch (value: chance of acceptance, from the
calibration; ties go to the shallower node, so every tree keeps a tree). k = 0 is allowed: no
speculation this step. After a step a request's budget grows while its whole tree is kept (a
drafter that is always right keeps growing its trees, up to max_budget), settles near what was
kept otherwise, and when nothing was kept the request stops drafting for 1, 2, 4, ... 64 steps
(a drafter that is never accepted ends up drafting nothing). After EXPLORE_EVERY plain steps, a
batch holding a likely node verifies its best speculative choice once, so the latency model sees
tree steps again (costs change with the batch) at a cost of under one step in EXPLORE_EVERY.
Trees whose children were sampled (sampling-mode heads) are verified whole: dropping sampled
siblings by their own values would bias exact verification; the nodes sizing would have kept set
their next budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tree import DraftTree
from .calibration import AcceptanceCalibration, accepted_path
from .latency import LatencyModel

MAX_BACKOFF = 64
DRAFT_EMA = 0.2
EXPLORE_EVERY = 32  # plain steps in a row before sizing verifies drafts again to re-measure them
EXPLORE_MIN_VALUE = 0.3  # ... when the batch's best node is at least this likely to be accepted


@dataclass
class RequestBudget:
    budget: int
    skip: int = 0  # steps left without drafting
    backoff: int = 0  # the last skip's length (0: none running)


class Sizer:
    def __init__(self, max_budget: int, latency: LatencyModel | None = None, start_budget: int | None = None) -> None:
        self.max_budget = max_budget
        self.start_budget = start_budget or max(1, max_budget // 2)
        self.latency = latency or LatencyModel()
        self.calibration = AcceptanceCalibration()
        self.draft_seconds = 0.0  # EMA of a step's drafting time
        self.kept_share = float("nan")  # share of drafted nodes kept by the last sizing (metrics)
        self.last_rates: tuple[float, float] | None = None  # (rate without, rate chosen) of the last sizing
        self.plain_steps = 0  # sizings in a row that kept nothing

    def new_budget(self) -> RequestBudget:
        return RequestBudget(self.start_budget)

    # ---- before drafting ----------------------------------------------------------------
    @staticmethod
    def budget_for(state: RequestBudget) -> int | None:
        """This step's node budget, or None: do not draft."""
        if state.skip > 0:
            state.skip -= 1
            return None
        return state.budget

    # ---- after drafting -----------------------------------------------------------------
    def size(
        self,
        trees: list[DraftTree],
        budgets: list[RequestBudget],
        decoding: int,
        base_tokens: int,
        draft_seconds: float,
    ) -> list[DraftTree]:
        """The trees cut to the batch's best node set. `decoding`: requests emitting a token this step
        (speculating or not); `base_tokens`: tokens the forward runs besides drafted nodes."""
        if draft_seconds > 0:
            self.draft_seconds = (
                draft_seconds
                if self.draft_seconds == 0
                else ((1 - DRAFT_EMA) * self.draft_seconds + DRAFT_EMA * draft_seconds)
            )
        candidates: list[tuple[float, int, int, int]] = []  # (value, depth, tree index, node)
        for t, tree in enumerate(trees):
            if tree.num_drafted:
                values, depths = self.calibration.node_values(tree), tree.depths.tolist()
                candidates.extend((float(values[i]), depths[i], t, i) for i in range(1, tree.num_nodes))
        candidates.sort(key=lambda c: (-c[0], c[1], c[2], c[3]))
        explore = self.plain_steps >= EXPLORE_EVERY and bool(candidates) and candidates[0][0] >= EXPLORE_MIN_VALUE
        k = self._best_count(np.array([c[0] for c in candidates]), decoding, base_tokens, explore)
        self.plain_steps = 0 if k else self.plain_steps + 1
        keep: list[list[int]] = [[0] for _ in trees]
        for _, _, t, node in candidates[:k]:
            keep[t].append(node)
        out = [tree if tree.sampled_children else tree.subtree(kept) for tree, kept in zip(trees, keep)]
        drafted = sum(t.num_drafted for t in trees)
        self.kept_share = sum(len(kept) - 1 for kept in keep) / drafted if drafted else float("nan")
        for tree, kept, state in zip(trees, keep, budgets):
            self._next_budget(state, tree.num_drafted, len(kept) - 1)
        return out

    def _best_count(self, values: np.ndarray, decoding: int, base: int, explore: bool = False) -> int:
        """The k maximising the batch's expected tokens per second (k >= 1 when exploring)."""
        measured = self.latency.samples > 0  # drafting seconds mean nothing against a unitless prior
        ks = np.arange(len(values) + 1)
        gain = decoding + np.concatenate([[0.0], np.cumsum(values)])
        spec = ks > 0
        cost = np.where(spec, self.latency.step(base + ks, True), self.latency.step(base + ks, False))
        cost = cost + np.where(spec, self.draft_seconds if measured else 0.0, 0.0)
        rates = gain / cost
        best = int(np.argmax(rates[1:])) + 1 if explore else int(np.argmax(rates))
        self.last_rates = (float(rates[0]), float(rates[best]))
        return best

    def _next_budget(self, state: RequestBudget, drafted: int, kept: int) -> None:
        if drafted == 0:  # nothing found to draft: no evidence either way
            return
        if kept == 0:
            state.backoff = min(MAX_BACKOFF, max(1, 2 * state.backoff))
            state.skip = state.backoff
            state.budget = max(1, state.budget // 2)
            return
        state.backoff = 0
        if kept == drafted:  # all worth it: grow where the drafter filled its budget
            if drafted >= state.budget:
                state.budget = min(self.max_budget, 2 * state.budget)
        else:
            state.budget = min(self.max_budget, max(1, kept + (kept + 1) // 2))

    # ---- after verifying ----------------------------------------------------------------
    def observe(self, tree: DraftTree, emitted: Iterable[int]) -> None:
        """What a verified tree emitted (accepted drafted tokens, then the bonus): calibration."""
        self.calibration.observe(tree, accepted_path(tree, emitted))

    def summary(self) -> dict[str, Any]:
        return {
            "latency": self.latency.summary(),
            "acceptance_by_score": self.calibration.summary(),
            "draft_ms": round(self.draft_seconds * 1e3, 3),
            "kept_share": self.kept_share,
        }
