"""Verification rules, selected by name from one registry shared by every runtime and plugin.

A rule is a pure function (tree, target_logits [num_nodes, vocab], params, rng, **options) ->
Accepted. Lossless rules: `greedy`, `sampling`. Lossy (opt-in only): `typical`.
"""
from .registry import Accepted, LOSSLESS_RULES, available_rules, get_rule, register_rule, verify
from . import greedy, sampling, typical  # noqa: F401  (registers the built-in rules)

__all__ = ["Accepted", "LOSSLESS_RULES", "available_rules", "get_rule", "register_rule", "verify"]
