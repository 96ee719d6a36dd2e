"""Argument types shared by the command line's subcommands."""

from __future__ import annotations

import argparse
import json


def json_object(text: str) -> dict:
    """A JSON object argument; anything else is refused with what was wrong."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e.msg} at column {e.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def fractions(text: str) -> tuple[float, ...]:
    """Comma-separated shares in (0, 1), e.g. 0.25,0.5."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or any(not 0.0 < v < 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"each share must lie in (0, 1); got {text!r}")
    return values


def names(text: str) -> tuple[str, ...]:
    """Comma-separated names, e.g. self,ngram."""
    return tuple(x.strip() for x in text.split(",") if x.strip())
