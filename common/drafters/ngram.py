"""Prompt lookup (n-gram) drafting over the prompt and the generated text, producing trees.

The last n tokens (n from max_ngram down to min_ngram) are searched for earlier in the sequence;
the tokens that followed each match are candidate continuations, most recent first. The first
`width` distinct continuations (up to `depth` tokens each) are merged into a trie rooted at the
last token, cut to `budget` nodes. Children are chosen deterministically: no draft distribution.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..params import check_int, reject_unknown
from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds


def lookup_continuations(
    seq: np.ndarray, max_ngram: int, min_ngram: int, depth: int, width: int
) -> list[tuple[int, ...]]:
    found: list[tuple[int, ...]] = []
    seen = set()
    n_tokens = seq.shape[0]
    for n in range(min(max_ngram, n_tokens - 1), min_ngram - 1, -1):
        pattern = seq[n_tokens - n :]
        windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # excludes the suffix itself
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        for start in hits[::-1]:  # most recent first
            cont = tuple(int(t) for t in seq[start + n : start + n + depth])
            if cont and cont not in seen:
                seen.add(cont)
                found.append(cont)
                if len(found) >= width:
                    return found
    return found


def keep_ranks(tree: DraftTree, paths: Iterable[tuple[int, ...]]) -> DraftTree:
    """Keep only nodes whose sibling-rank path is listed (a static topology)."""
    allowed = set(paths)
    ranks = [()] + tree.rank_paths()
    keep = [0] + [i for i in range(1, tree.num_nodes) if ranks[i] in allowed]
    return tree.subtree(keep)  # rank paths are prefix-closed: every kept node's parent is kept


class NgramDrafter:
    name = "ngram"
    needs = DrafterNeeds()

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, **options: object) -> None:
        reject_unknown("drafter 'ngram'", options, ())
        self.max_ngram = check_int("drafter 'ngram'", "max_ngram", max_ngram, 1, 64)
        self.min_ngram = check_int("drafter 'ngram'", "min_ngram", min_ngram, 1, self.max_ngram)

    def begin(self) -> None:
        pass

    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        seq = context.tokens.cpu().numpy()
        # A static topology asks for up to its widest sibling rank at every level.
        conts = lookup_continuations(
            seq,
            self.max_ngram,
            self.min_ngram,
            shape.depth,
            max(shape.width, shape.budget if shape.paths else shape.width),
        )
        tree = DraftTree.from_token_paths(int(seq[-1]), conts, max_nodes=None if shape.paths else shape.budget)
        if shape.paths is not None:
            tree = keep_ranks(tree, shape.paths)
        return tree
