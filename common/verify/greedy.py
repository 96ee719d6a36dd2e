"""Greedy tree verification: follow the child equal to the target's argmax; emit the argmax where
no child matches. Output equals plain greedy decoding token for token."""
from __future__ import annotations

from ..params import reject_unknown
from .registry import Accepted, register_rule


@register_rule("greedy")
def verify_tree_greedy(tree, target_logits, params, rng, **options) -> Accepted:
    reject_unknown("acceptance rule 'greedy'", options, ())
    best = target_logits.argmax(-1).tolist()
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        nxt = next((c for c in tree.children(node) if tokens[c] == best[node]), None)
        if nxt is None:
            return Accepted(tuple(path), best[node])
        node = nxt
        path.append(node)
