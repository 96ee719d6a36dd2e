"""The drafters that need no weights (prompt lookup, suffix), made by name with their options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..params import ConfigError
from .base import Drafter
from .ngram import NgramDrafter
from .suffix import check_suffix_options, suffix_drafters

LOOKUP_DRAFTERS = ("ngram", "suffix")


def lookup_drafters(name: str, options: dict[str, Any]) -> Callable[[], Drafter]:
    """A factory of per-request drafters (a suffix drafter's share one cache), options checked now:
    a ConfigError names the option and what is allowed."""
    if name == "suffix":
        return suffix_drafters(options)
    if name == "ngram":
        NgramDrafter(**options)
        return lambda: NgramDrafter(**options)
    raise ConfigError(f"drafter {name!r} is not one of {list(LOOKUP_DRAFTERS)}")


def check_lookup_options(name: str, options: dict[str, Any]) -> None:
    """Validate a weightless drafter's options without building anything."""
    if name == "suffix":
        check_suffix_options(options)
    else:
        NgramDrafter(**options)
