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
