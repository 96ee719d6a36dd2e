"""Training-time test (EAGLE-3): unroll `steps` draft steps over a whole sequence at once.

Pair t of step 0 is (fused target features of position t, token t+1) at RoPE position t+1; pair t
of step j >= 1 is (the head's step j-1 output at t, token t+1+j) at position t+1+j and predicts the
target's distribution at position t+1+j. It attends, as a drafted node of depth j does at
inference, to step-0 pairs s <= t (real features) and to its own chain: pairs t of steps 1..j.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..drafters.eagle_head import EagleHead


def _expand_heads(x: torch.Tensor, group: int) -> torch.Tensor:
    return x if group == 1 else x.repeat_interleave(group, dim=-2)


def ttt_forward(
    head: EagleHead,
    fused: torch.Tensor,
    tokens: torch.Tensor,
    steps: int,
    positions: torch.Tensor | None = None,
    embeds: torch.Tensor | None = None,
    refine: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """fused [B, T, h] (features of positions 0..T-1), tokens [B, T + steps] (tokens 1..T+steps,
    padded past the sequence's end). Returns each step's output hidden [B, T, h].

    A compressed context (vision drafters) passes its entries instead: `positions` [B, T] their
    RoPE positions (default 1..T), `embeds` [B, T, h] step 0's input embeddings, and `refine`
    (hidden -> hidden) applied to every step's output; step j of entry i then reads entry i + j's
    token, which is right wherever entries i..i+j have consecutive positions."""
    c = head.config
    bsz, t_len, _ = fused.shape
    group = c.num_attention_heads // c.num_key_value_heads
    scale = c.head_dim**-0.5
    causal = torch.ones(t_len, t_len, dtype=torch.bool, device=fused.device).tril()
    base_pos = torch.arange(1, t_len + 1, device=fused.device).expand(bsz, t_len) if positions is None else positions
    feats, outs, chain_k, chain_v = fused, [], [], []
    k0 = v0 = None
    for j in range(steps):
        x, q, k, v = head.attention_inputs(tokens[:, j : j + t_len], feats, base_pos + j, embeds if j == 0 else None)
        k, v = _expand_heads(k, group), _expand_heads(v, group)
        if j == 0:
            k0, v0 = k, v
        else:
            chain_k.append(k)
            chain_v.append(v)
        s0 = torch.einsum("bthd,bshd->bhts", q, k0) * scale
        s0 = s0.masked_fill(~causal, float("-inf"))
        diag = [torch.einsum("bthd,bthd->bht", q, ki)[..., None] * scale for ki in chain_k]
        probs = torch.softmax(torch.cat([s0, *diag], -1), -1)
        attn = torch.einsum("bhts,bshd->bthd", probs[..., :t_len], v0)
        for i, vi in enumerate(chain_v):
            attn = attn + probs[..., t_len + i].permute(0, 2, 1)[..., None] * vi
        feats = head.attention_outputs(x, attn)
        if refine is not None:
            feats = refine(feats)
        outs.append(feats)
    return outs


def ttt_loss(
    head: EagleHead,
    fused: torch.Tensor,
    tokens: torch.Tensor,
    target_logits: torch.Tensor,
    valid: torch.Tensor,
    steps: int,
    decay: float = 0.8,
    token_weights: torch.Tensor | None = None,
    start_mask: torch.Tensor | None = None,
    **forward_options: Any,
) -> tuple[torch.Tensor, list[float]]:
    """Sum over steps of decay^j * soft cross-entropy against the target's distribution.

    target_logits [B, T + steps, Vd]: the target's logits over the draft vocabulary at positions
    1..T+steps (step j's labels are rows j..j+T-1); valid [B, T + steps] marks real positions;
    token_weights (optional) [B, T + steps] scale each position (AdaSPEC selection); start_mask
    (optional) [B, T] keeps only the chains that start at its entries; forward_options go to
    ttt_forward. Returns (loss, per-step top-1 agreement list)."""
    outs = ttt_forward(head, fused, tokens, steps, **forward_options)
    t_len = fused.shape[1]
    total: torch.Tensor | float = 0.0
    accs: list[float] = []
    for j, h in enumerate(outs):
        logq = F.log_softmax(head.draft_logits(h).float(), -1)  # fp32 even under autocast
        tgt = target_logits[:, j : j + t_len].float()
        p = F.softmax(tgt, -1)
        real = valid[:, j : j + t_len].float()
        if start_mask is not None:
            real = real * start_mask.float()
        mask = real
        if token_weights is not None:
            mask = mask * token_weights[:, j : j + t_len]
        ce = -(p * logq).sum(-1)
        denom = mask.sum().clamp_min(1.0)
        total = total + (decay**j) * (ce * mask).sum() / denom
        hit = (logq.argmax(-1) == tgt.argmax(-1)).float() * real
        accs.append(float(hit.sum() / real.sum().clamp_min(1.0)))
    assert isinstance(total, torch.Tensor)  # steps >= 1: at least one step's loss was added
    return total, accs
