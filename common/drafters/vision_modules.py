"""The learned parts of the vision-aware drafter, beside its EAGLE head.

- `ImageAdaptor` (ViSpec): learnable queries cross-attend over an image's embedding rows; their mean
  is the one compressed token that stands for the whole span, and a projection of it is the global
  image vector g.
- `GlobalFusion` (ViSpec): text features become fc([f; g]); fc starts as [I | 0], so an untrained
  fusion leaves the head's features unchanged.
- `CrossAttentionInjection` (DREAM): the head's output hidden state attends over the target's fused
  features of the image rows and adds the result through a tanh gate that starts at 0 (identity).
Each module's initial state is the plain EAGLE head's behaviour except the adaptor's token, which
replaces image rows by construction.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _rms(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)


class ImageAdaptor(nn.Module):
    def __init__(self, hidden: int, num_queries: int, num_heads: int) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"adaptor: hidden size {hidden} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.queries = nn.Parameter(torch.randn(num_queries, hidden) * 0.02)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.g_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, image_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[n, h] image embedding rows -> (compressed token [h], global vector g [h])."""
        x = _rms(image_rows.to(self.k_proj.weight.dtype))
        nh, h = self.num_heads, x.shape[-1]
        q = self.queries.view(-1, nh, h // nh).transpose(0, 1)
        k = self.k_proj(x).view(-1, nh, h // nh).transpose(0, 1)
        v = self.v_proj(x).view(-1, nh, h // nh).transpose(0, 1)
        pooled = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).flatten(-2)
        token = self.o_proj(pooled).mean(0)
        return token, self.g_proj(token)


class GlobalFusion(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.weight[:, :hidden].copy_(torch.eye(hidden))

    def forward(self, features: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """features [q, h], g [h] -> fc([features; g]) [q, h]."""
        g = g.to(features.dtype).expand(features.shape[0], -1)
        return self.fc(torch.cat([features, g], -1).to(self.fc.weight.dtype))


class CrossAttentionInjection(nn.Module):
    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"cross-attention: hidden size {hidden} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Parameter(torch.zeros(()))

    def forward(self, hidden: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
        """hidden [q, h] attends over image_features [n, h]; returns hidden + tanh(gate) * attention."""
        nh, h = self.num_heads, hidden.shape[-1]
        dtype = self.q_proj.weight.dtype
        q = self.q_proj(_rms(hidden.to(dtype))).view(-1, nh, h // nh).transpose(0, 1)
        kv = _rms(image_features.to(dtype))
        k = self.k_proj(kv).view(-1, nh, h // nh).transpose(0, 1)
        v = self.v_proj(kv).view(-1, nh, h // nh).transpose(0, 1)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).flatten(-2)
        return hidden + torch.tanh(self.gate).to(hidden.dtype) * self.o_proj(attn).to(hidden.dtype)


def embedding_saliency(rows: torch.Tensor) -> torch.Tensor:
    """How far each image row lies from its image's mean row: a cheap, training-free saliency."""
    rows = rows.float()
    return (rows - rows.mean(0, keepdim=True)).norm(dim=-1)


def keep_top(scores: torch.Tensor, keep_ratio: float) -> torch.Tensor:
    """Indices (ascending) of the ceil(keep_ratio * n) highest scores; at least one."""
    n = scores.numel()
    k = max(1, min(n, int(-(-keep_ratio * n // 1))))
    return torch.topk(scores.float(), k).indices.sort().values
