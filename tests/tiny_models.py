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


TINY_IMAGE_TOKEN = 95


def tiny_llava(seed: int = 0, image_size: int = 16, patch_size: int = 4, dtype=torch.float32):
    """A LLaVA model around tiny_llama's text model (same weights for the same seed) with a random
    CLIP tower: (image_size / patch_size)^2 image rows per image, placeholder id TINY_IMAGE_TOKEN."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration
    text = tiny_llama(seed=seed)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=image_size, patch_size=patch_size, projection_dim=32)
    config = LlavaConfig(vision_config=vision, text_config=text.config, image_token_index=TINY_IMAGE_TOKEN,
                         image_seq_length=(image_size // patch_size) ** 2, vision_feature_select_strategy="default",
                         vision_feature_layer=-1, tie_word_embeddings=True)
    torch.manual_seed(seed + 1)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(text.model.state_dict())
    return model.to(dtype).eval()
