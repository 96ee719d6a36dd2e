"""Head checkpoints on disk: one folder with config.json and model.safetensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..params import ConfigError

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def write_checkpoint(folder: str | Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(folder / WEIGHTS_NAME))


def read_config(folder: str | Path, owner: str) -> dict[str, Any]:
    """The folder's config.json; a ConfigError naming `owner` when either file is missing."""
    folder = Path(folder)
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (folder / name).is_file():
            raise ConfigError(f"{owner}: {folder} has no {name}")
    return json.loads((folder / CONFIG_NAME).read_text())


def read_weights(folder: str | Path, owner: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = Path(folder) / WEIGHTS_NAME
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for a damaged file
        raise ConfigError(f"{owner}: {path} is not a readable safetensors file ({type(e).__name__}: {e})") from None
