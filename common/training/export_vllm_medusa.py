"""Export MedusaHeads to the folder vLLM loads with `method: "medusa"`.

vLLM's Medusa model: per head, residual blocks `blocks.{i}.layers.{j}` (x + SiLU(W x + b) with
`medusa_fc_bias`), then an output layer. With `original_lm_head` one output layer
(`lm_heads.0.weight`, the target's whole vocabulary) serves every head. The blocks are the same
computation as ours; the one difference: vLLM ranks the whole vocabulary while heads trained with a
draft vocabulary rank only those tokens, so their top-1 can differ where the target's favourite lies
outside it. vLLM drafts chains (each head's top-1).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..drafters.medusa import MedusaHeads


def export_vllm_medusa(heads: MedusaHeads, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    from safetensors.torch import save_file

    c = heads.config
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {}
    for i, head in enumerate(heads.head_layers()):
        for j, linear in enumerate(head):
            state[f"blocks.{i}.layers.{j}.weight"] = linear.weight.detach().to(dtype).contiguous().clone()
            state[f"blocks.{i}.layers.{j}.bias"] = linear.bias.detach().to(dtype).contiguous().clone()
    state["lm_heads.0.weight"] = heads.target_lm_head.detach().to(dtype).contiguous().clone()
    save_file(state, str(out / "model.safetensors"))
    config = {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "truncated_vocab_size": c.vocab_size,
        # vLLM renames any key holding "num" and "heads" / "layers": these two and no others.
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "medusa_fc_bias": True,
        "original_lm_head": True,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out
