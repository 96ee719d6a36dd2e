"""The EAGLE drafter: an EagleHead fed with the target's features of committed positions.

Between steps the head's cache holds one entry per committed pair (feature t, token t+1) for
t < L, where L + 1 is the committed length (the root, token L, pairs with feature L - 1). Tree
nodes pair their parent's head output with their own token; they live in scratch slots that are
dropped after drafting.
"""
from __future__ import annotations

import torch

from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds
from .eagle_head import EagleHead
from .expansion import grow_tree
from .tree_lm import ScratchTree, causal_extension_mask


def committed_features(context: DraftContext, drafter: str):
    """(tokens, features, committed pairs L): features must cover every committed position but the root."""
    tokens, feats = context.tokens, context.hidden_states
    committed_pairs = tokens.numel() - 1
    if feats is None or feats.shape[0] != committed_pairs:
        raise ValueError(f"{drafter} drafter needs target features for all {committed_pairs} committed "
                         f"positions before the root; got {None if feats is None else feats.shape[0]}")
    return tokens, feats, committed_pairs


class HeadScorer:
    """Scores tree nodes with the head: a node pairs its parent's output hidden state with its own
    token. `refine` (hidden -> hidden) post-processes every output, e.g. a vision injection."""

    def __init__(self, head: EagleHead, scratch: ScratchTree, root_hidden: torch.Tensor, refine=None):
        self.head, self.scratch, self.refine = head, scratch, refine
        self.hidden = {0: root_hidden}

    def score(self, nodes, tokens, parents, depths) -> torch.Tensor:
        mask, positions = self.scratch.add(nodes, parents, depths)
        feats = torch.stack([self.hidden[p] for p in parents])
        out = self.head.hidden_step(torch.tensor(tokens, dtype=torch.long), feats, positions, mask)
        if self.refine is not None:
            out = self.refine(out)
        for n, h in zip(nodes, out):
            self.hidden[n] = h
        return self.head.logits(out)


class EagleDrafter:
    name = "eagle"

    def __init__(self, head: EagleHead, sample_children: bool = False):
        self.head = head
        self.sample_children = sample_children
        self.needs = DrafterNeeds(hidden_states=True, hidden_layer_ids=head.config.target_layer_ids)

    def begin(self) -> None:
        self.head.reset_cache()

    @torch.no_grad()
    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams,
                rng: RandomSource) -> DraftTree:
        tokens, feats, committed_pairs = committed_features(context, "eagle")
        m = min(self.head.cache_length, committed_pairs - 1)
        self.head.truncate(m)
        new = committed_pairs - m
        out, logits = self.head.step(tokens[m + 1:], self.head.fuse(feats[m:]),
                                     torch.arange(m + 1, committed_pairs + 1), causal_extension_mask(m, new))
        scorer = HeadScorer(self.head, ScratchTree(committed_pairs, root_position=committed_pairs), out[-1])
        tree = grow_tree(int(tokens[-1]), logits[-1], scorer, shape, params, rng, self.sample_children)
        self.head.truncate(committed_pairs)
        return tree
