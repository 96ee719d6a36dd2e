"""One acceptance spec for every runtime: a rule name, or {"rule": NAME, **options}. `Acceptance`
is the rule built once at startup: options checked by a dry run of the rule on a one-node step (a
bad key, value or judge file fails before any request), a judge file loaded once."""

from __future__ import annotations

import json
from typing import Any

import torch

from ..params import ConfigError
from ..random_source import RandomSource, TorchRandom
from ..sampling import SamplingParams
from ..tree import DraftTree
from .judge_file import load_judge
from .registry import Accepted, available_rules, is_lossless, rule_needs_hidden, verify


def parse_acceptance(value: object, owner: str) -> tuple[str, dict[str, Any]]:
    """(rule, options) from a name, a dict or a JSON object text."""
    options: dict[str, Any]
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{owner}: acceptance is not valid JSON: {e}") from None
    if isinstance(value, str):
        rule, options = value, {}
    elif isinstance(value, dict):
        if "rule" not in value:
            raise ConfigError(f"{owner}: acceptance {value!r} needs a 'rule' key; allowed rules: {available_rules()}")
        options = dict(value)
        rule = options.pop("rule")
    else:
        raise ConfigError(f"{owner}: acceptance={value!r} must be a rule name or an object with 'rule'")
    if rule not in available_rules():
        raise ConfigError(f"{owner}: acceptance rule {rule!r} is unknown; allowed: {available_rules()}")
    if is_lossless(rule) and options:
        raise ConfigError(f"{owner}: acceptance rule {rule!r} takes no options; got {sorted(options)}")
    return rule, options


def parse_server_acceptance(value: object, owner: str) -> tuple[str, dict[str, Any]]:
    """An engine server's acceptance: as `parse_acceptance`, but plain 'greedy'/'sampling' are
    refused, since each would fail the requests of the other kind; 'auto' chooses per request."""
    rule, options = parse_acceptance(value, owner)
    if rule in ("greedy", "sampling"):
        raise ConfigError(
            f"{owner}: acceptance={rule!r}: use 'auto' (greedy or exact sampling per "
            f"request, from its temperature) or a lossy rule: typical, kl-judge, judge"
        )
    return rule, options


def check_acceptance(rule: str, options: dict[str, Any], vocab_size: int, hidden_size: int) -> None:
    """Runs the rule once on a root-only tree: every option is read and validated as in serving."""
    params = SamplingParams() if rule != "sampling" else SamplingParams(temperature=1.0)
    verify(
        DraftTree.root_only(0),
        torch.zeros(1, vocab_size),
        params,
        rule,
        TorchRandom(0),
        target_hidden=torch.zeros(1, hidden_size),
        **options,
    )


class Acceptance:
    """An acceptance rule with its options, validated and loaded once; `verify` per tree."""

    def __init__(
        self,
        rule: str,
        options: dict[str, Any] | None = None,
        vocab_size: int | None = None,
        hidden_size: int | None = None,
    ) -> None:
        self.rule = rule
        options = dict(options or {})
        if rule == "judge" and "path" in options:
            options["path"] = load_judge(options["path"])  # read once, not stat'ed per step
        self.options = options
        self.lossless = is_lossless(rule)
        self.needs_hidden = rule_needs_hidden(rule)
        if vocab_size is not None:
            check_acceptance(rule, options, vocab_size, hidden_size or 1)

    def verify(
        self,
        tree: DraftTree,
        logits: torch.Tensor,
        params: SamplingParams,
        rng: RandomSource,
        hidden: torch.Tensor | None = None,
    ) -> Accepted:
        return verify(tree, logits, params, self.rule, rng, target_hidden=hidden, **self.options)
