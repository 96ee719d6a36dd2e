"""Sampling parameters and the one function that turns logits into the distribution sampled from.

Every rule and every drafter calls `process_logits` with the same parameters, so the target's p and
the draft's q are processed identically (temperature, then top-k, then top-p).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .params import check_float, check_int


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0

    def __post_init__(self) -> None:
        check_float("sampling", "temperature", self.temperature, 0.0)
        check_int("sampling", "top_k", self.top_k, 0)
        check_float("sampling", "top_p", self.top_p, 0.0, 1.0, lo_open=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities over the last dim. Greedy: one-hot at the argmax (first on ties)."""
    if params.greedy:
        out = torch.zeros_like(logits, dtype=torch.float32 if logits.dtype != torch.float64 else logits.dtype)
        return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    x = logits.float() if logits.dtype != torch.float64 else logits.clone()
    x = x / params.temperature
    if params.top_k and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly above each token
        drop_sorted = before >= params.top_p  # keeps the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of softmax(logits) over the last dim (temperature 1)."""
    p = torch.softmax(logits.float(), dim=-1)
    return -torch.special.xlogy(p, p).sum(-1)  # 0 log 0 = 0: masked (-inf) logits add nothing
