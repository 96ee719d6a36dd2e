"""Verification rules, selected by name from one registry shared by every runtime and plugin.

A rule is a pure function (tree, target_logits [num_nodes, vocab], params, rng, **options) ->
Accepted. Lossless rules: `greedy`, `sampling`. Lossy (opt-in only), each the lossless walk plus
extra acceptances: `typical`, `kl-judge`, `judge` (learned; reads the target's last hidden states).
"""

from . import greedy, judge, kl_judge, sampling, typical  # noqa: F401  (registers the built-in rules)
from .judge_file import JudgeFile, load_judge
from .registry import (
    LOSSLESS_RULES,
    Accepted,
    available_rules,
    get_rule,
    is_lossless,
    register_rule,
    rule_needs_hidden,
    verify,
)

__all__ = [
    "LOSSLESS_RULES",
    "Accepted",
    "JudgeFile",
    "available_rules",
    "get_rule",
    "is_lossless",
    "load_judge",
    "register_rule",
    "rule_needs_hidden",
    "verify",
]
