"""`LatencyModel`: what one engine step costs on the machine it runs on, by the tokens it runs.

    step(n, trees) = forward(n) + offset(trees) + overhead
forward(n): the target's forward over n tokens (every request's root, tree nodes, prefill chunks),
piecewise linear through one point per size class (log2 buckets of n), each an EMA of its
measurements: a startup profile (`observe_profile`) where the runtime runs one, else the engine's
plain steps. offset(trees): what a real step adds to a profiled forward (sampling, input
preparation; with trees, tree attention and verification), learned from the engine's own steps
(`observe_step`), separately for steps that verified drafts and steps that did not; `overhead`:
time between steps (scheduling, outputs). Nothing is assumed about the machine but, before the
first measurement, that an added token costs PRIOR_TOKEN_SHARE of a one-token forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

EMA = 0.1  # weight of a new measurement in its size class and in the offsets
PRIOR_TOKEN_SHARE = 0.25  # before any measurement: n tokens cost 1 + 0.25 (n - 1) one-token forwards
PROFILE_REACH = 2.0  # steps beyond this x the largest profiled size do not teach the offsets


@dataclass
class LatencyModel:
    points: dict[int, tuple[float, float]] = field(default_factory=dict)  # log2 class -> (mean n, seconds)
    profiled: bool = False
    offsets: dict[bool, float] = field(default_factory=dict)  # drafts verified -> seconds added to forward(n)
    overhead: float = 0.0  # seconds between steps
    samples: int = 0  # steps and profile runs measured
    tree_samples: int = 0  # of those, steps that verified drafts

    @staticmethod
    def size_class(n: float) -> int:
        return round(math.log2(max(1.0, float(n))))

    # ---- measuring ----------------------------------------------------------------------
    def _add_point(self, n_tokens: int, seconds: float) -> None:
        c = self.size_class(n_tokens)
        old = self.points.get(c)
        self.points[c] = (
            (float(n_tokens), float(seconds))
            if old is None
            else ((1 - EMA) * old[0] + EMA * n_tokens, (1 - EMA) * old[1] + EMA * seconds)
        )

    def observe_profile(self, n_tokens: int, seconds: float) -> None:
        """A startup profile's forward over n_tokens took `seconds`."""
        if n_tokens >= 1 and seconds > 0 and math.isfinite(seconds):
            self.profiled = True
            self._add_point(n_tokens, seconds)
            self.samples += 1

    def observe_step(self, n_tokens: int, seconds: float, trees: bool = False) -> None:
        """One engine step ran n_tokens through the target in `seconds`; `trees`: it verified drafts."""
        if n_tokens < 1 or not seconds > 0 or not math.isfinite(seconds):
            return
        self.samples += 1
        self.tree_samples += trees
        if not self.profiled and not trees:  # no profile: plain steps are the forward's points
            self._add_point(n_tokens, seconds)
            return
        if self.profiled and n_tokens > PROFILE_REACH * max(n for n, _ in self.points.values()):
            return
        residual = seconds - self.forward(n_tokens)
        old = self.offsets.get(trees)
        self.offsets[trees] = residual if old is None else (1 - EMA) * old + EMA * residual

    def observe_overhead(self, seconds: float) -> None:
        """Time between two steps (the engine's own bookkeeping)."""
        if seconds >= 0 and math.isfinite(seconds):
            self.overhead = seconds if self.overhead == 0.0 else (1 - EMA) * self.overhead + EMA * seconds

    # ---- predicting ---------------------------------------------------------------------
    @overload
    def forward(self, n_tokens: float) -> float: ...
    @overload
    def forward(self, n_tokens: np.ndarray) -> np.ndarray: ...
    def forward(self, n_tokens: float | np.ndarray) -> float | np.ndarray:
        """Seconds of a forward over n_tokens (a number or an array of them)."""
        n = np.asarray(n_tokens, dtype=float)
        pts = sorted(self.points.values())
        if not pts:
            out = 1.0 + PRIOR_TOKEN_SHARE * (n - 1)  # unitless until measured: only ratios are read
        elif len(pts) == 1:
            n0, t0 = pts[0]
            out = t0 * (1.0 + PRIOR_TOKEN_SHARE * (n - n0) / max(n0, 1.0))
        else:
            xs = np.array([p[0] for p in pts])
            ts = np.maximum.accumulate(np.array([p[1] for p in pts]))  # never cheaper with more tokens
            out = np.interp(n, xs, ts)
            slope = max(0.0, (ts[-1] - ts[-2]) / max(xs[-1] - xs[-2], 1e-9))
            out = np.where(n > xs[-1], ts[-1] + slope * (n - xs[-1]), out)
        out = np.maximum(out, 1e-9)
        return float(out) if out.ndim == 0 else out

    def offset(self, trees: bool) -> float:
        """Seconds a step adds to its forward; a tree step not yet measured is taken as a plain one."""
        plain = self.offsets.get(False, 0.0)
        return self.offsets.get(True, plain) if trees else plain

    @overload
    def step(self, n_tokens: float, trees: bool) -> float: ...
    @overload
    def step(self, n_tokens: np.ndarray, trees: bool) -> np.ndarray: ...
    def step(self, n_tokens: float | np.ndarray, trees: bool) -> float | np.ndarray:
        """Seconds of a whole step over n_tokens (drafting excluded)."""
        return np.maximum(self.forward(n_tokens) + self.offset(trees), 1e-9) + self.overhead

    def summary(self) -> dict[str, Any]:
        """What the log and the metrics show."""
        return {
            "forward_ms": {round(n): round(t * 1e3, 3) for n, t in sorted(self.points.values())},
            "profiled": self.profiled,
            "offset_ms": {("trees" if k else "plain"): round(v * 1e3, 3) for k, v in self.offsets.items()},
            "overhead_ms": round(self.overhead * 1e3, 3),
            "samples": self.samples,
            "tree_samples": self.tree_samples,
        }


def profile_sizes(max_tokens: int) -> list[int]:
    """Token counts a startup profile measures: powers of two up to max_tokens."""
    sizes, n = [], 1
    while n <= max_tokens:
        sizes.append(n)
        n *= 2
    return sizes
