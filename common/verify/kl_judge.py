"""The training-free KL judge (lossy): a drafted child the lossless test rejects is still accepted
when KL(q || p) < threshold (nats), q the draft's and p the target's distribution at its parent.

Where the tree carries no draft distribution (prompt lookup) q is one-hot on the child, so the
divergence is -log p(child). KL >= 0, so threshold 0 accepts nothing extra: lossless output."""

from __future__ import annotations

import torch

from ..params import check_float, reject_unknown
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .lossy import criterion_probs, extended_walk
from .registry import Accepted, register_rule

OWNER = "acceptance rule 'kl-judge'"


def kl_divergence(q: torch.Tensor, p: torch.Tensor) -> float:
    """sum_x q(x) log(q(x) / p(x)) over q's support; inf where p misses part of it."""
    support = q > 0
    qs, ps = q[support].double(), p[support].double()
    if bool((ps <= 0).any()):
        return float("inf")
    return float((qs * (qs.log() - ps.log())).sum().clamp_min(0.0))


@register_rule("kl-judge")
def verify_tree_kl_judge(
    tree: DraftTree,
    target_logits: torch.Tensor,
    params: SamplingParams,
    rng: RandomSource,
    threshold: float = 0.5,
    **options: object,
) -> Accepted:
    reject_unknown(OWNER, options, ("threshold",))
    check_float(OWNER, "threshold", threshold, 0.0)
    probs = criterion_probs(target_logits, params)
    tokens = tree.tokens.tolist()

    def extra(node: int, child: int) -> bool:
        p = probs(node)
        if tree.draft_probs is None:
            q = torch.zeros_like(p)
            q[tokens[child]] = 1.0
        else:
            q = tree.draft_probs[node].to(p.dtype)
        return kl_divergence(q, p) < threshold

    return extended_walk(tree, target_logits, params, rng, extra)
