"""Tree policies: one interface, `plan(state) -> TreeShape` and `observe(stats)`; state per request."""

from __future__ import annotations

from typing import Any

from ..params import ConfigError
from .base import DecodeState, StepStats, TreePolicy, TreeShape, cap_depth, cap_shape
from .chain import ChainPolicy
from .dynamic import DynamicPolicy
from .sage import SagePolicy, calibrate_thresholds
from .static import StaticPolicy

POLICIES = {p.name: p for p in (ChainPolicy, StaticPolicy, DynamicPolicy, SagePolicy)}


def make_policy(name: str, **options: Any) -> TreePolicy:
    if name not in POLICIES:
        raise ConfigError(f"policy {name!r} is unknown; allowed: {sorted(POLICIES)}")
    return POLICIES[name](**options)


__all__ = [
    "POLICIES",
    "ChainPolicy",
    "DecodeState",
    "DynamicPolicy",
    "SagePolicy",
    "StaticPolicy",
    "StepStats",
    "TreePolicy",
    "TreeShape",
    "calibrate_thresholds",
    "cap_depth",
    "cap_shape",
    "make_policy",
]
