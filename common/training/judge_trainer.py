"""Training the AutoJudge classifier: StandardScaler + LogisticRegression on the target's last
hidden state at mined draft tokens (label 1: important), C chosen by validation ROC-AUC.

Operating points come from validation quantiles: `recall_R` is the threshold under which a
fraction 1 - R of the validation's important tokens fall, so accepting p < threshold lets through
about that fraction of important mismatches (and whatever share of unimportant ones it reports).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..params import ConfigError
from ..verify.judge_file import JudgeFile

RECALLS = (0.99, 0.95, 0.9, 0.8, 0.7, 0.5)


def _check_split(name: str, x: np.ndarray, y: np.ndarray) -> None:
    if x.ndim != 2 or len(x) != len(y):
        raise ConfigError(f"train-judge: {name} split must be [n, hidden] with n labels; got {x.shape}, {y.shape}")
    if len(set(y.tolist())) < 2:
        raise ConfigError(
            f"train-judge: the {name} split has only one class ({len(y)} examples, "
            f"{int(y.sum())} important); mine more prompts"
        )


def train_judge(
    x_train: npt.ArrayLike,
    y_train: npt.ArrayLike,
    x_val: npt.ArrayLike,
    y_val: npt.ArrayLike,
    cs: Sequence[float] = (0.001, 0.01, 0.1, 1.0, 10.0),
    seed: int = 0,
    provenance: dict[str, Any] | None = None,
) -> JudgeFile:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    x_train, x_val = np.asarray(x_train, dtype=np.float64), np.asarray(x_val, dtype=np.float64)
    y_train, y_val = np.asarray(y_train, dtype=np.int64), np.asarray(y_val, dtype=np.int64)
    _check_split("train", x_train, y_train)
    _check_split("validation", x_val, y_val)
    scaler = StandardScaler().fit(x_train)
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)  # a constant feature carries no weight
    z_train, z_val = (x_train - scaler.mean_) / scale, (x_val - scaler.mean_) / scale
    scores = {}
    for c in cs:
        clf = LogisticRegression(C=c, class_weight="balanced", max_iter=2000, random_state=seed).fit(z_train, y_train)
        scores[c] = (roc_auc_score(y_val, clf.predict_proba(z_val)[:, 1]), clf)
    best_c = max(scores, key=lambda c: scores[c][0])
    auc, clf = scores[best_c]
    p_val = clf.predict_proba(z_val)[:, 1]
    important, unimportant = p_val[y_val == 1], p_val[y_val == 0]
    thresholds, points = {}, {}
    for r in RECALLS:
        t = float(np.quantile(important, 1.0 - r))
        thresholds[f"recall_{r}"] = min(1.0, max(0.0, t))
        points[f"recall_{r}"] = {
            "important_accepted": float((important < t).mean()),
            "unimportant_accepted": float((unimportant < t).mean()),
        }
    info = {
        **(provenance or {}),
        "C": best_c,
        "validation_roc_auc": float(auc),
        "roc_auc_by_C": {str(c): float(s[0]) for c, s in scores.items()},
        "train_examples": len(y_train),
        "train_important": int(y_train.sum()),
        "validation_examples": len(y_val),
        "validation_important": int(y_val.sum()),
        "operating_points": points,
    }
    weights = clf.coef_[0]
    if not all(math.isfinite(v) for v in weights):
        raise ConfigError("train-judge: the fit produced non-finite weights")
    return JudgeFile(
        hidden_size=int(x_train.shape[1]),
        mean=tuple(float(v) for v in scaler.mean_),
        scale=tuple(float(v) for v in scale),
        weights=tuple(float(v) for v in weights),
        bias=float(clf.intercept_[0]),
        thresholds=thresholds,
        provenance=info,
    )
