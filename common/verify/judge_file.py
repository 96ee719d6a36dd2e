"""The learned judge's file (AutoJudge): a standardised logistic regression on the target's last
hidden state at a drafted token, giving the probability that accepting that token changes the
task's outcome ("important"). A lossy rule accepts a mismatching draft token when that
probability is below a threshold.

File: JSON (a few times the hidden size in numbers), fields
  format        "sagespec-judge/1"
  hidden_size   H, the target's hidden size; a judge for another size is refused at load
  feature       what the vector is: "target_last_hidden_at_draft_token"
  mean, scale   [H] each: StandardScaler's statistics (scale > 0)
  weights, bias [H] and a number: LogisticRegression's coefficients and intercept
  thresholds    {"name": value in [0, 1]}: named operating points (validation quantiles)
  provenance    free-form: target, task, data sizes, C, validation ROC-AUC, ...
p(important | h) = sigmoid(weights . (h - mean) / scale + bias).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import torch

from ..params import ConfigError

FORMAT = "sagespec-judge/1"
FEATURE = "target_last_hidden_at_draft_token"


@dataclass(frozen=True)
class JudgeFile:
    hidden_size: int
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    thresholds: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    feature: str = FEATURE
    format: str = FORMAT

    def __post_init__(self) -> None:
        where = f"judge file ({self.provenance.get('path', 'in memory')})"
        if self.format != FORMAT:
            raise ConfigError(f"{where}: format={self.format!r}; this version reads {FORMAT!r}")
        if self.feature != FEATURE:
            raise ConfigError(f"{where}: feature={self.feature!r}; allowed: {FEATURE!r}")
        if isinstance(self.hidden_size, bool) or not isinstance(self.hidden_size, int) or self.hidden_size < 1:
            raise ConfigError(f"{where}: hidden_size={self.hidden_size!r} must be a positive integer")
        for name in ("mean", "scale", "weights"):
            values = getattr(self, name)
            if len(values) != self.hidden_size:
                raise ConfigError(f"{where}: {name} has {len(values)} values; hidden_size is {self.hidden_size}")
            bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
            if bad is not None:
                raise ConfigError(f"{where}: {name}[{bad}]={values[bad]!r} is not finite")
        bad = next((i for i, v in enumerate(self.scale) if v <= 0), None)
        if bad is not None:
            raise ConfigError(f"{where}: scale[{bad}]={self.scale[bad]!r} must be > 0")
        if not math.isfinite(self.bias):
            raise ConfigError(f"{where}: bias={self.bias!r} is not finite")
        for name, t in self.thresholds.items():
            if not (isinstance(t, (int, float)) and 0.0 <= t <= 1.0):
                raise ConfigError(f"{where}: thresholds[{name!r}]={t!r} must be a number in [0, 1]")

    def check_hidden_size(self, hidden_size: int, owner: str) -> None:
        if hidden_size != self.hidden_size:
            raise ConfigError(
                f"{owner}: the judge was trained for hidden_size={self.hidden_size}; "
                f"this target's hidden_size is {hidden_size}"
            )

    def threshold(self, value: object, owner: str) -> float:
        """A number in [0, 1], or the name of one of the file's operating points."""
        if isinstance(value, str):
            if value not in self.thresholds:
                raise ConfigError(
                    f"{owner}: threshold={value!r} is not one of the judge's operating points "
                    f"{sorted(self.thresholds)} (or give a number in [0, 1])"
                )
            return float(self.thresholds[value])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ConfigError(
                f"{owner}: threshold={value!r} must be a number in [0, 1] or an operating point "
                f"name {sorted(self.thresholds)}"
            )
        return float(value)

    @cached_property
    def tensors(self) -> tuple[torch.Tensor, float]:
        """(weights / scale, bias - weights . mean / scale) in float64: p = sigmoid(h . a + c).
        Computed once per loaded file (verification reads it every step)."""
        w = torch.tensor(self.weights, dtype=torch.float64)
        s = torch.tensor(self.scale, dtype=torch.float64)
        mu = torch.tensor(self.mean, dtype=torch.float64)
        a = w / s
        return a, float(self.bias - (a * mu).sum())

    def probability(self, hidden: torch.Tensor) -> torch.Tensor:
        """p(important) for rows of hidden [n, H] (one batched matrix-vector product)."""
        a, c = self.tensors
        return torch.sigmoid(hidden.double() @ a + c)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> JudgeFile:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"judge file {str(path)!r} does not exist")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"judge file {str(path)!r} is not JSON: {e}") from None
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(required - set(raw))
        unknown = sorted(set(raw) - known)
        if missing or unknown:
            raise ConfigError(f"judge file {str(path)!r}: missing fields {missing}, unknown fields {unknown}")
        for name in ("mean", "scale", "weights"):
            raw[name] = tuple(float(v) for v in raw[name])
        raw["bias"] = float(raw["bias"])
        raw["provenance"] = {**raw.get("provenance", {}), "path": str(path)}
        return cls(**raw)


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> JudgeFile:
    return JudgeFile.load(path)


def load_judge(path: str | Path | JudgeFile) -> JudgeFile:
    """Loaded once per file version (keyed by path and modification time); a missing file is
    refused by JudgeFile.load. A JudgeFile already loaded is returned as it is."""
    if isinstance(path, JudgeFile):
        return path
    p = Path(path).resolve()
    return _load_cached(str(p), p.stat().st_mtime_ns if p.is_file() else -1)
