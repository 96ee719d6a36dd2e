"""Trained drafters that ship inside the package for the embedded default models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .params import ConfigError

ASSETS = Path(__file__).parent / "assets"
# Models built on another's text model use its head (the head reads only the text model).
SAME_TEXT_MODEL = {"smollm2-llava": "smollm2"}
# The target's config fields a shipped head's MANIFEST records: a head fits a target equal in all.
TARGET_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size")


def shipped_head(model_name: str) -> Path | None:
    """The EAGLE head folder that ships for `model_name` (e.g. 'smollm2'), if any."""
    folder = ASSETS / f"{SAME_TEXT_MODEL.get(model_name, model_name)}-eagle3"
    return folder if (folder / "config.json").is_file() else None


def shipped_medusa(model_name: str) -> Path | None:
    """The Medusa heads folder that ships for `model_name`, if any."""
    folder = ASSETS / f"{SAME_TEXT_MODEL.get(model_name, model_name)}-medusa"
    return folder if (folder / "config.json").is_file() else None


def shipped_heads(kind: str = "eagle3") -> dict[str, dict[str, int]]:
    """Each shipped folder of this kind ('eagle3' or 'medusa') -> the target config it was trained on."""
    heads = {}
    for manifest in sorted(ASSETS.glob(f"*-{kind}/MANIFEST.json")):
        heads[manifest.parent.name] = json.loads(manifest.read_text())["target_config"]
    return heads


def shipped_head_for(config: Any) -> Path:
    """The shipped EAGLE head trained on a target with this (text) config: hidden size, layer
    count and vocabulary all equal; a ConfigError naming what ships otherwise."""
    return _shipped_for(config, "eagle3", "drafter 'eagle' needs model: an EAGLE head folder")


def shipped_medusa_for(config: Any) -> Path:
    """The shipped Medusa heads trained on a target with this (text) config."""
    return _shipped_for(config, "medusa", "drafter 'medusa' needs model: a Medusa heads folder")


def _shipped_for(config: Any, kind: str, needs: str) -> Path:
    target = {name: getattr(config, name, None) for name in TARGET_FIELDS}
    heads = shipped_heads(kind)
    for name, fitted in heads.items():
        if fitted == target:
            return ASSETS / name
    shipped = "; ".join(f"{name} (for {fitted})" for name, fitted in heads.items()) or "none"
    raise ConfigError(f"{needs}; none shipped fits this target {target} (shipped: {shipped})")
