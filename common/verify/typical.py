"""Typical acceptance (Medusa; lossy): accept child x when p(x) > min(eps, delta * exp(-H(p))).

Among the children that pass, the most probable one is followed. The bonus token is the argmax at
temperature 0 and a sample from p otherwise. Never the default: it changes the output distribution.
"""
from __future__ import annotations

import math

import torch

from ..params import check_float, reject_unknown
from ..sampling import SamplingParams, process_logits
from .registry import Accepted, register_rule


@register_rule("typical")
def verify_tree_typical(tree, target_logits, params, rng, eps: float = 0.09, delta: float = 0.3,
                        **options) -> Accepted:
    reject_unknown("acceptance rule 'typical'", options, ("eps", "delta"))
    check_float("acceptance rule 'typical'", "eps", eps, 0.0, 1.0)
    check_float("acceptance rule 'typical'", "delta", delta, 0.0)
    # The criterion reads a proper distribution even for greedy requests (temperature 1 there).
    crit_params = params if not params.greedy else SamplingParams(temperature=1.0)
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        p = process_logits(target_logits[node], crit_params)
        logp = torch.log(p.clamp_min(1e-30))
        h = float(-(p * logp).sum())
        threshold = min(eps, delta * math.exp(-h))
        passing = [c for c in tree.children(node) if float(p[tokens[c]]) > threshold]
        if not passing:
            bonus = int(target_logits[node].argmax()) if params.greedy else rng.choice(p)
            return Accepted(tuple(path), bonus)
        node = max(passing, key=lambda c: float(p[tokens[c]]))
        path.append(node)
