"""The rule registry and the result type every rule returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ..params import ConfigError
from ..random_source import RandomSource, TorchRandom
from ..sampling import SamplingParams
from ..tree import DraftTree

LOSSLESS_RULES = frozenset({"greedy", "sampling"})
# A rule: (tree, target_logits, params, rng, **options) -> Accepted.
Rule = Callable[..., "Accepted"]
R = TypeVar("R", bound=Rule)
_RULES: dict[str, Rule] = {}
_NEEDS_HIDDEN: set[str] = set()


@dataclass(frozen=True)
class Accepted:
    """`nodes`: accepted node indices from the root (always node 0) down the tree;
    `bonus`: the token the target emits after the last accepted node."""

    nodes: tuple[int, ...]
    bonus: int

    @property
    def num_drafted_accepted(self) -> int:
        return len(self.nodes) - 1

    def emitted(self, tree: DraftTree) -> list[int]:
        return [int(tree.tokens[i]) for i in self.nodes[1:]] + [self.bonus]


def register_rule(name: str, needs_hidden: bool = False) -> Callable[[R], R]:
    """`needs_hidden`: the rule reads the target's last hidden state per tree node (the rows the
    verify forward already computed), passed as `target_hidden` [num_nodes, hidden]."""

    def deco(fn: R) -> R:
        if name in _RULES:
            raise ConfigError(f"verification rule {name!r} is already registered")
        _RULES[name] = fn
        if needs_hidden:
            _NEEDS_HIDDEN.add(name)
        return fn

    return deco


def rule_needs_hidden(name: str) -> bool:
    return name in _NEEDS_HIDDEN


def is_lossless(name: str) -> bool:
    return name == "auto" or name in LOSSLESS_RULES


def available_rules() -> list[str]:
    return sorted(_RULES) + ["auto"]


def get_rule(name: str, params: SamplingParams) -> Rule:
    """`auto` is greedy at temperature 0 and exact sampling otherwise, as the engines choose."""
    if name == "auto":
        name = "greedy" if params.greedy else "sampling"
    if name not in _RULES:
        raise ConfigError(f"acceptance rule {name!r} is unknown; allowed: {available_rules()}")
    if name == "greedy" and not params.greedy:
        raise ConfigError("acceptance rule 'greedy' needs temperature 0; use 'sampling' or 'auto'")
    return _RULES[name]


def verify(
    tree: DraftTree,
    target_logits: torch.Tensor,
    params: SamplingParams,
    rule: str = "auto",
    rng: RandomSource | None = None,
    target_hidden: torch.Tensor | None = None,
    **options: Any,
) -> Accepted:
    if target_logits.dim() != 2 or target_logits.shape[0] != tree.num_nodes:
        raise ValueError(f"target_logits must be [num_nodes={tree.num_nodes}, vocab]; got {tuple(target_logits.shape)}")
    rng = rng or TorchRandom(generator=torch.default_generator)  # a fresh TorchRandom() repeats its stream
    fn = get_rule(rule, params)
    if rule in _NEEDS_HIDDEN:
        if target_hidden is None or target_hidden.dim() != 2 or target_hidden.shape[0] != tree.num_nodes:
            got = None if target_hidden is None else tuple(target_hidden.shape)
            raise ValueError(
                f"acceptance rule {rule!r} needs target_hidden [num_nodes={tree.num_nodes}, hidden]; got {got}"
            )
        return fn(tree, target_logits, params, rng, target_hidden=target_hidden, **options)
    return fn(tree, target_logits, params, rng, **options)
