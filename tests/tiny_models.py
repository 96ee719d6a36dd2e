"""Tiny random Llama models for fast tests (head_dim 32, as engine CPU kernels require >= 32)."""
from __future__ import annotations

import torch


def tiny_llama(vocab_size: int = 96, hidden: int = 64, layers: int = 2, seed: int = 0, init_std: float = 0.2,
               dtype=torch.float32):
    """A random LlamaForCausalLM. A large init_std makes its distributions peaked (repetitive
    text, so lookup drafts get accepted) without ties that fp32 noise could flip."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                         max_position_embeddings=512, rope_theta=10000.0, initializer_range=init_std,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(dtype).eval()
    return model
