"""Typical acceptance (Medusa's criterion; lossy): a drafted child x the lossless test rejects is
still accepted when p(x) > min(eps, delta * exp(-H(p))), p the target's distribution at its parent.

The criterion only ever adds acceptances to the lossless rule of the request's kind, so eps = 0
(or delta = 0) accepts nothing extra and reproduces lossless output exactly. Never the default.
"""

from __future__ import annotations

import math
from functools import cache

import torch

from ..params import check_float, reject_unknown
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .lossy import criterion_probs, extended_walk
from .registry import Accepted, register_rule

OWNER = "acceptance rule 'typical'"


@register_rule("typical")
def verify_tree_typical(
    tree: DraftTree,
    target_logits: torch.Tensor,
    params: SamplingParams,
    rng: RandomSource,
    eps: float = 0.09,
    delta: float = 0.3,
    **options: object,
) -> Accepted:
    reject_unknown(OWNER, options, ("eps", "delta"))
    check_float(OWNER, "eps", eps, 0.0, 1.0)
    check_float(OWNER, "delta", delta, 0.0)
    probs = criterion_probs(target_logits, params)
    tokens = tree.tokens.tolist()

    @cache
    def node_threshold(node: int) -> float:  # once per node, however many children it has
        p = probs(node)
        h = float(-(p * torch.log(p.clamp_min(1e-30))).sum())
        return min(eps, delta * math.exp(-h))

    def extra(node: int, child: int) -> bool:
        threshold = node_threshold(node)
        return threshold > 0 and float(probs(node)[tokens[child]]) > threshold

    return extended_walk(tree, target_logits, params, rng, extra)
