"""Export an EagleHead to the EAGLE-3 draft folder vLLM loads with `method: "eagle3"`.

vLLM's Llama EAGLE-3 draft: one decoder layer (`midlayer.*`) whose attention reads
[input_layernorm(embedding); hidden_norm(features)], `fc` over the target's auxiliary hidden
states (ids in `eagle_aux_hidden_state_layer_ids`, HF hidden-state indexing), `norm`, a draft-vocab
`lm_head`, and `d2t` stored as offsets (target id - draft id). The head's own layout is the same
computation, so only names change; embeddings stay the target's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..drafters.eagle_head import EagleHead

_NAMES = {
    "fc.weight": "fc.weight",
    "q_proj.weight": "midlayer.self_attn.q_proj.weight",
    "k_proj.weight": "midlayer.self_attn.k_proj.weight",
    "v_proj.weight": "midlayer.self_attn.v_proj.weight",
    "o_proj.weight": "midlayer.self_attn.o_proj.weight",
    "gate_proj.weight": "midlayer.mlp.gate_proj.weight",
    "up_proj.weight": "midlayer.mlp.up_proj.weight",
    "down_proj.weight": "midlayer.mlp.down_proj.weight",
    "embed_norm": "midlayer.input_layernorm.weight",
    "hidden_norm": "midlayer.hidden_norm.weight",
    "post_norm": "midlayer.post_attention_layernorm.weight",
    "final_norm": "norm.weight",
}


def export_vllm_eagle3(
    head: EagleHead, out_dir: str | Path, max_position_embeddings: int, dtype: torch.dtype = torch.bfloat16
) -> Path:
    from safetensors.torch import save_file

    c = head.config
    if len(c.target_layer_ids) != 3:
        raise ValueError(f"vLLM's EAGLE-3 drafts fuse three target layers; this head has {list(c.target_layer_ids)}")
    state = head.state_dict()
    tensors = {new: state[old].to(dtype) for old, new in _NAMES.items()}
    if head.lm_head is not None:
        tensors["lm_head.weight"] = head.lm_head.weight.detach().to(dtype)
        assert c.draft_vocab_size is not None  # the head has an lm_head only with a draft vocabulary
        tensors["d2t"] = head.d2t - torch.arange(c.draft_vocab_size)
    else:
        tensors["lm_head.weight"] = head._target_lm_head.to(dtype)
        tensors["d2t"] = torch.zeros(c.vocab_size, dtype=torch.long)
    draft_vocab = c.draft_vocab_size or c.vocab_size
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": c.hidden_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps,
        "num_hidden_layers": 1,
        "rope_theta": c.rope_theta,
        "max_position_embeddings": max_position_embeddings,
        "vocab_size": c.vocab_size,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": c.target_hidden_size,
        "tie_word_embeddings": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "eagle_aux_hidden_state_layer_ids": list(c.target_layer_ids),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(c.target_layer_ids), "use_aux_hidden_state": True},
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    return out
