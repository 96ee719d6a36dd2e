"""Validation of user-facing knobs: every error names the owner, the parameter and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping


class ConfigError(ValueError):
    """A configuration value is not allowed. The message names the key and the allowed values."""


def check_int(owner: str, name: str, value: object, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}: {name}={value!r} must be an integer")
    if value < lo or (hi is not None and value > hi):
        allowed = f"{lo} <= {name}" + (f" <= {hi}" if hi is not None else "")
        raise ConfigError(f"{owner}: {name}={value} is out of range; allowed: {allowed}")
    return value


def check_float(
    owner: str,
    name: str,
    value: object,
    lo: float,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{owner}: {name}={value!r} must be a finite number")
    value = float(value)
    bad_lo = value <= lo if lo_open else value < lo
    bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
    if bad_lo or bad_hi:
        left = f"{lo} {'<' if lo_open else '<='} {name}"
        right = "" if hi is None else f" {'<' if hi_open else '<='} {hi}"
        raise ConfigError(f"{owner}: {name}={value} is out of range; allowed: {left}{right}")
    return value


def check_choice(owner: str, name: str, value: str, allowed: Collection[str]) -> str:
    if value not in allowed:
        raise ConfigError(f"{owner}: {name}={value!r} is not one of {sorted(allowed)}")
    return value


def reject_unknown(owner: str, options: Mapping[str, object], known: Collection[str]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"{owner}: unknown option(s) {unknown}; allowed: {sorted(known)}")
