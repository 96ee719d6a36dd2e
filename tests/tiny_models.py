"""Tiny random Llama models for fast tests (head_dim 32, as engine CPU kernels require >= 32)."""

from __future__ import annotations

import torch


def tiny_llama(
    vocab_size: int = 96, hidden: int = 64, layers: int = 2, seed: int = 0, init_std: float = 0.2, dtype=torch.float32
):
    """A random LlamaForCausalLM. A large init_std makes its distributions peaked (repetitive
    text, so lookup drafts get accepted) without ties that fp32 noise could flip."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=512,
        rope_theta=10000.0,
        initializer_range=init_std,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(dtype).eval()
    return model


TINY_IMAGE_TOKEN = 95


def tiny_llava(seed: int = 0, image_size: int = 16, patch_size: int = 4, dtype=torch.float32):
    """A LLaVA model around tiny_llama's text model (same weights for the same seed) with a random
    CLIP tower: (image_size / patch_size)^2 image rows per image, placeholder id TINY_IMAGE_TOKEN."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    text = tiny_llama(seed=seed)
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch_size,
        projection_dim=32,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text.config,
        image_token_index=TINY_IMAGE_TOKEN,
        image_seq_length=(image_size // patch_size) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed + 1)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(text.model.state_dict())
    return model.to(dtype).eval()


def tiny_gemma3(
    vocab_size: int = 96, sliding_window: int = 8, seed: int = 0, init_std: float = 0.5, dtype=torch.float32
):
    """A random Gemma3ForCausalLM: two sliding-window layers (window `sliding_window`) around one
    global layer, as Gemma 3 interleaves them; prompts longer than the window exercise it."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=32,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=512,
        initializer_range=init_std,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    return _amplify_sublayers(Gemma3ForCausalLM(config)).to(dtype).eval()


def tiny_gemma2(
    vocab_size: int = 96,
    sliding_window: int = 8,
    softcap: float = 5.0,
    seed: int = 0,
    init_std: float = 0.5,
    dtype=torch.float32,
):
    """A random Gemma2ForCausalLM: sliding-window and global layers alternate, and attention scores
    are soft-capped at `softcap` (tanh), Gemma 2's two attention features."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=32,
        sliding_window=sliding_window,
        attn_logit_softcapping=softcap,
        hidden_act="gelu_pytorch_tanh",  # SGLang reads this older name of hidden_activation
        final_logit_softcapping=None,
        max_position_embeddings=512,
        initializer_range=init_std,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    return _amplify_sublayers(Gemma2ForCausalLM(config)).to(dtype).eval()


def _amplify_sublayers(model, gain: float = 16.0):
    """Gemma scales its (tied) embeddings by sqrt(hidden) and normalises each sublayer's output, so a
    random model echoes its input token. Larger post-sublayer norm weights let attention and the
    MLP steer the output (and the window matter)."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.post_attention_layernorm.weight.fill_(gain)
            layer.post_feedforward_layernorm.weight.fill_(gain)
    return model


def tiny_bloom(vocab_size: int = 96, seed: int = 0, dtype=torch.float32):
    """A random BloomForCausalLM: ALiBi position biases instead of RoPE."""
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        n_layer=2,
        n_head=2,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    return BloomForCausalLM(config).to(dtype).eval()


def tiny_gpt_oss(vocab_size: int = 96, seed: int = 0, dtype=torch.float32):
    """A random GptOssForCausalLM: learned attention sinks in every layer (and a mixture of experts)."""
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_local_experts=2,
        num_experts_per_tok=1,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1e4,
            "factor": 1.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "original_max_position_embeddings": 4096,
        },
    )
    torch.manual_seed(seed)
    return GptOssForCausalLM(config).to(dtype).eval()


def head_pass_logits(head, n: int = 6, seed: int = 0):
    """An EAGLE head's logits for one pass over n random (feature, token) pairs from an empty cache."""
    from sagespec.common.drafters.tree_lm import causal_extension_mask

    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, head.fc.in_features, generator=g)
    toks = torch.randint(0, head.config.vocab_size, (n,), generator=g)
    head.reset_cache()
    return head.step(toks, head.fuse(feats), torch.arange(1, n + 1), causal_extension_mask(0, n))[1]
