"""SAGE: the tree's shape follows the prediction's entropy under a fixed node budget.

Each step reads the target's entropy at the last accepted position (free after verify), smooths it
with an EMA across steps (entropy is strongly correlated between consecutive steps), and maps the
smoothed value to a shape: low entropy -> deep and narrow (speculate further), high entropy ->
shallow and wide (diversify). The map is a position u in [0, 1] between the confident shape
(max_depth) and the uncertain one (min_depth); width is budget / depth, clamped to max_width.
mode "tiers" quantises u by `thresholds` (len(thresholds) + 1 tiers, e.g. from entropy quantiles
of a calibration run, see `calibrate_thresholds`); mode "continuous" interpolates linearly between
thresholds[0] and thresholds[-1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..params import ConfigError, check_choice, check_float, check_int, reject_unknown
from .base import DecodeState, StepStats, TreeShape

OWNER = "policy 'sage'"


def calibrate_thresholds(entropies: Sequence[float], quantiles: Sequence[float] = (1 / 3, 2 / 3)) -> tuple[float, ...]:
    """Tier thresholds at the given quantiles of entropies observed on a calibration run."""
    values = sorted(float(e) for e in entropies)
    if not values:
        raise ConfigError(f"{OWNER}: calibration needs at least one entropy value")
    out = []
    for q in quantiles:
        check_float(OWNER, "quantile", q, 0.0, 1.0, lo_open=True, hi_open=True)
        pos = q * (len(values) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        out.append(values[lo] + (values[hi] - values[lo]) * (pos - lo))
    return tuple(out)


class SagePolicy:
    name = "sage"
    reads_entropy = True  # observe() smooths StepStats.target_entropy

    def __init__(
        self,
        budget: int = 16,
        min_depth: int = 2,
        max_depth: int = 8,
        max_width: int = 8,
        ema: float = 0.5,
        mode: str = "tiers",
        thresholds: Sequence[float] = (0.5, 1.5),
        **options: object,
    ) -> None:
        reject_unknown(OWNER, options, ())
        self.budget = check_int(OWNER, "budget", budget, 1, 1024)
        self.min_depth = check_int(OWNER, "min_depth", min_depth, 1, 64)
        self.max_depth = check_int(OWNER, "max_depth", max_depth, self.min_depth, 64)
        self.max_width = check_int(OWNER, "max_width", max_width, 1, 64)
        self.ema = check_float(OWNER, "ema", ema, 0.0, 1.0, lo_open=True)
        self.mode = check_choice(OWNER, "mode", mode, ("tiers", "continuous"))
        thresholds = tuple(check_float(OWNER, "thresholds", t, 0.0) for t in thresholds)
        if not thresholds or list(thresholds) != sorted(thresholds):
            raise ConfigError(f"{OWNER}: thresholds={list(thresholds)} must be a non-empty ascending list of nats")
        if mode == "continuous" and len(thresholds) < 2:
            raise ConfigError(f"{OWNER}: mode 'continuous' needs thresholds [low, high]")
        self.thresholds = thresholds
        self.smoothed: float | None = None

    def uncertainty(self) -> float:
        """u in [0, 1]: 0 confident, 1 uncertain. Before any observation, the middle."""
        h = self.smoothed
        if h is None:
            return 0.5
        if self.mode == "continuous":
            lo, hi = self.thresholds[0], self.thresholds[-1]
            return min(1.0, max(0.0, (h - lo) / (hi - lo))) if hi > lo else float(h > lo)
        tier = sum(h >= t for t in self.thresholds)
        return tier / len(self.thresholds)

    def shape_for(self, u: float, budget: int | None = None) -> TreeShape:
        budget = self.budget if budget is None else min(budget, self.budget)
        depth = round(self.max_depth + u * (self.min_depth - self.max_depth))
        depth = min(depth, budget)
        width = max(1, min(self.max_width, round(budget / depth)))
        return TreeShape(depth=depth, width=width, budget=budget)

    def plan(self, state: DecodeState) -> TreeShape:
        return self.shape_for(self.uncertainty(), state.budget)

    def observe(self, stats: StepStats) -> None:
        h = float(stats.target_entropy)
        if math.isnan(h):  # no entropy was read for this step: the EMA stays as it was
            return
        self.smoothed = h if self.smoothed is None else self.ema * h + (1 - self.ema) * self.smoothed
