"""Lossy acceptance: the lossless walk of the request's kind (greedy or exact sampling), extended
so that a child the lossless test rejects is still followed when a rule's predicate accepts it.

Each lossy rule is a predicate `extra(node, child) -> bool` over the verify step's data. It draws
no randomness, so wherever it never fires the output equals the lossless rule's, token for token
and random draw for random draw. Criteria that read a distribution use the target's at
temperature 1 for greedy requests (a one-hot says nothing about how close a miss was)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch

from ..random_source import RandomSource
from ..sampling import SamplingParams, process_logits
from ..tree import DraftTree
from .greedy import greedy_walk
from .registry import Accepted
from .sampling import sampling_walk

_T1 = SamplingParams(temperature=1.0)


def extended_walk(
    tree: DraftTree,
    target_logits: torch.Tensor,
    params: SamplingParams,
    rng: RandomSource,
    extra: Callable[[int, int], bool],
) -> Accepted:
    if params.greedy:
        return greedy_walk(tree, target_logits, extra)
    return sampling_walk(tree, target_logits, params, rng, extra)


def criterion_probs(target_logits: torch.Tensor, params: SamplingParams) -> Callable[[int], torch.Tensor]:
    """A per-node cache of the distribution a lossy criterion reads: p(node) as sampled, or at
    temperature 1 for greedy requests."""
    crit = params if not params.greedy else _T1

    @cache
    def probs(node: int) -> torch.Tensor:
        return process_logits(target_logits[node], crit)

    return probs
