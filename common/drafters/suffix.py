"""Suffix drafting: trees from what followed the longest match of the context's end, in the request's
own text and in every earlier request's (one `SuffixCache` per engine), scored by how often each
continuation followed.

Each step the drafter finds the longest match (`min_match` .. `max_match` tokens) of the committed
sequence's end, both in the request's own tokens and in the cache; every occurrence of that length
(the newest `max_candidates`) contributes the tokens that followed it. Merged into a trie, a node's
count is how many occurrences continue through it (count / its parent's count is the node's
`DraftTree.confidence`, which cost-aware sizing calibrates); nodes are taken best count first (parents before
children), at most `width` children each, `budget` nodes, and only while count / occurrences >=
`min_prob`; at most `depth` levels and, as in suffix decoding, `max_spec_factor` x the match's length
(a short match drafts little). No draft distribution: children are chosen deterministically.
A request's whole sequence joins the cache when the request ends (`end`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..params import check_float, check_int, reject_unknown
from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds
from .ngram import keep_ranks
from .suffix_cache import (
    DEFAULT_CACHED_TOKENS,
    DEFAULT_CANDIDATES,
    MAX_CACHED_TOKENS,
    MAX_CANDIDATES,
    MIN_CACHED_TOKENS,
    SEPARATOR,
    SuffixCache,
    backward_match_lengths,
)

OWNER = "drafter 'suffix'"
CACHE_OPTIONS = ("max_cached_tokens", "max_candidates")


def own_matches(seq: np.ndarray, max_match: int) -> tuple[int, list[int]]:
    """(length, end positions newest first) of the longest earlier match of seq's end in seq."""
    ends = np.flatnonzero(seq[:-1] == seq[-1])
    if ends.size == 0:
        return 0, []
    limit = min(max_match, seq.size - 1)
    positions = ends[:, None] - np.arange(limit)[None, :]
    lengths = backward_match_lengths(np.where(positions >= 0, seq[np.maximum(positions, 0)], SEPARATOR), seq)
    best = int(lengths.max())
    return best, [int(e) for e in ends[lengths == best][::-1]]


def frequency_tree(
    root: int, continuations: list[list[int]], depth: int, width: int, budget: int, min_prob: float
) -> DraftTree:
    """The trie of the continuations cut best count first (see the module's docstring)."""
    counts: list[int] = [len(continuations)]
    kids: list[dict[int, int]] = [{}]
    tokens = [root]
    for cont, times in Counter(tuple(c[:depth]) for c in continuations).items():  # first-seen order kept
        node = 0
        for tok in cont:
            child = kids[node].get(tok)
            if child is None:
                child = kids[node][tok] = len(tokens)
                tokens.append(tok)
                counts.append(0)
                kids.append({})
            counts[child] += times
            node = child
    floor = min_prob * counts[0]
    out_tokens, out_parents, taken = [root], [-1], {0: 0}
    share = [1.0]  # each kept node's count over its parent's: the drafter's chance of it given the parent
    width_left = {0: width}
    heap = [(-counts[c], c, 0) for c in kids[0].values()]
    heapq.heapify(heap)
    while heap and len(out_tokens) - 1 < budget:
        neg, node, parent = heapq.heappop(heap)
        if -neg < floor:
            break  # counts only fall from here on
        if width_left[parent] == 0:
            continue
        width_left[parent] -= 1
        taken[node] = len(out_tokens)
        out_tokens.append(tokens[node])
        out_parents.append(taken[parent])
        share.append(counts[node] / counts[parent])
        width_left[node] = width
        for child in kids[node].values():
            heapq.heappush(heap, (-counts[child], child, node))
    return DraftTree.from_parents(out_tokens, out_parents, confidence=torch.tensor(share))


class SuffixDrafter:
    name = "suffix"
    needs = DrafterNeeds()

    def __init__(
        self,
        cache: SuffixCache | None,
        min_match: int = 1,
        max_match: int = 24,
        min_prob: float = 0.1,
        max_spec_factor: float = 1.0,
        **options: object,
    ) -> None:
        reject_unknown(OWNER, options, ())
        self.cache = cache
        self.min_match = check_int(OWNER, "min_match", min_match, 1, 64)
        self.max_match = check_int(OWNER, "max_match", max_match, self.min_match, 256)
        self.min_prob = check_float(OWNER, "min_prob", min_prob, 0.0, 1.0)
        self.max_spec_factor = check_float(OWNER, "max_spec_factor", max_spec_factor, 0.0, 64.0, lo_open=True)
        self.seen: np.ndarray | None = None

    def begin(self) -> None:
        self.seen = None

    def end(self) -> None:
        """The request is over: its sequence joins the shared cache."""
        if self.seen is not None:
            assert self.cache is not None  # None only for option checking (check_suffix_options)
            self.cache.add(self.seen)
        self.seen = None

    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        seq = context.tokens.cpu().numpy()
        self.seen = seq
        root = int(seq[-1])
        own_len, own_ends = own_matches(seq, self.max_match)
        assert self.cache is not None  # None only for option checking (check_suffix_options)
        cached_len, cached_ends = self.cache.matches(seq, self.max_match, at_least=own_len)
        best = max(own_len, cached_len)
        if best < self.min_match:
            return DraftTree.root_only(root)
        limit = self.cache.max_candidates
        depth = min(shape.depth, max(1, int(self.max_spec_factor * best)))  # short matches, short drafts
        continuations = [seq[e + 1 : e + 1 + depth].tolist() for e in own_ends[:limit]] if own_len == best else []
        if cached_len == best:
            continuations += self.cache.continuations(cached_ends[: limit - len(continuations)], depth)
        # A static topology takes the whole trie and keeps the ranks it names.
        static = shape.paths is not None
        tree = frequency_tree(
            root,
            [c for c in continuations if c],
            depth,
            len(continuations) if static else shape.width,
            len(continuations) * depth if static else shape.budget,
            self.min_prob,
        )
        return keep_ranks(tree, shape.paths) if shape.paths is not None else tree


def check_suffix_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the cache's arguments, each drafter's) from drafter_options, all validated without building
    the cache: a ConfigError names the option and what is allowed."""
    options = dict(options)
    reject_unknown(OWNER, options, ("min_match", "max_match", "min_prob", "max_spec_factor", *CACHE_OPTIONS))
    cache = {
        "max_tokens": check_int(
            OWNER,
            "max_cached_tokens",
            options.pop("max_cached_tokens", DEFAULT_CACHED_TOKENS),
            MIN_CACHED_TOKENS,
            MAX_CACHED_TOKENS,
        ),
        "max_candidates": check_int(
            OWNER, "max_candidates", options.pop("max_candidates", DEFAULT_CANDIDATES), 1, MAX_CANDIDATES
        ),
    }
    SuffixDrafter(None, **options)
    return cache, options


def suffix_drafters(options: dict[str, Any]) -> Callable[[], SuffixDrafter]:
    """Per-request suffix drafters sharing one cache (`max_cached_tokens`, `max_candidates` size it)."""
    cache_args, drafter_args = check_suffix_options(options)
    cache = SuffixCache(**cache_args, owner=OWNER)
    return lambda: SuffixDrafter(cache, **drafter_args)
