"""A trained head folder, loaded against its target, written in vLLM's format: EAGLE-3 heads as an
EAGLE-3 draft, Medusa heads as a Medusa draft."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sagespec.common.drafters import EagleHead, MedusaHeads
from sagespec.common.drafters.medusa import MEDUSA_FORMAT
from sagespec.common.params import ConfigError
from sagespec.common.training.export_vllm import export_vllm_eagle3
from sagespec.common.training.export_vllm_medusa import export_vllm_medusa
from sagespec.plugins.transformers.model_loading import load_model


def export_head_for_vllm(head_dir, model: str, out_dir, dtype=torch.bfloat16) -> Path:
    """The head at `head_dir` (checked against `model`: 'smollm2' or a folder) exported to `out_dir`."""
    target, _ = load_model(str(model), "float32")
    config = Path(head_dir) / "config.json"
    if not config.is_file():
        raise ConfigError(f"--head {head_dir}: no config.json there")
    if json.loads(config.read_text()).get("format") == MEDUSA_FORMAT:
        heads = MedusaHeads.load(head_dir, target.get_output_embeddings().weight, target.config.num_hidden_layers)
        with torch.no_grad():
            return export_vllm_medusa(heads, out_dir, dtype=dtype)
    head = EagleHead.load(
        head_dir,
        target.get_input_embeddings().weight,
        target.get_output_embeddings().weight,
        target.config.num_hidden_layers,
    )
    with torch.no_grad():
        return export_vllm_eagle3(head, out_dir, target.config.max_position_embeddings, dtype=dtype)
