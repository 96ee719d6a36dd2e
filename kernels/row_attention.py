"""One query row's attention probabilities, averaged over heads: how much a position attends to
each key (image-row saliency in both plugins reads it from the target's own q and k)."""

from __future__ import annotations

import torch


def row_attention(
    q: torch.Tensor, k: torch.Tensor, scale: float | None = None, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """q [Hq, D], k [T, Hkv, D] (Hq a multiple of Hkv), mask [T] bool (True: attended) -> [T] fp32."""
    q, k = q.float(), k.float().repeat_interleave(q.shape[0] // k.shape[1], 1)
    scores = torch.einsum("hd,thd->ht", q, k) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1).mean(0)
