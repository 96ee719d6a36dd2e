"""Trained drafters that ship inside the package for the embedded default models."""
from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).parent / "assets"
# Models built on another's text model use its head (the head reads only the text model).
SAME_TEXT_MODEL = {"smollm2-llava": "smollm2"}


def shipped_head(model_name: str) -> Path | None:
    """The EAGLE head folder that ships for `model_name` (e.g. 'smollm2'), if any."""
    folder = ASSETS / f"{SAME_TEXT_MODEL.get(model_name, model_name)}-eagle3"
    return folder if (folder / "config.json").is_file() else None
