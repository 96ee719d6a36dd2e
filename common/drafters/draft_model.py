"""An independent draft model: any causal LM sharing the target's tokenizer, behind `TreeLM`.

Its cache holds committed tokens only between steps: each propose feeds what is new (the root
included), grows the tree in scratch slots after it, then truncates back to the committed length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..params import ConfigError
from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds
from .expansion import grow_tree
from .tree_lm import ScratchTree, TreeLM, causal_extension_mask


def check_shared_vocabulary(
    target_vocab: Mapping[str, int], draft_vocab: Mapping[str, int], draft_name: str = "draft model"
) -> None:
    """Refuse a draft whose tokenizer maps any token string to another id than the target's."""
    if target_vocab == draft_vocab:
        return
    diff = sorted(set(target_vocab.items()) ^ set(draft_vocab.items()), key=lambda kv: kv[1])[:5]
    raise ConfigError(
        f"{draft_name}: tokenizer does not match the target's (target vocab {len(target_vocab)} "
        f"tokens, draft {len(draft_vocab)}; first differences (token, id): {diff}); "
        "a draft model must share the target's tokenizer"
    )


class LMScorer:
    """Scores tree nodes with a TreeLM, each new level appended after the committed cache."""

    def __init__(self, lm: TreeLM, scratch: ScratchTree) -> None:
        self.lm, self.scratch = lm, scratch

    def score(
        self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int]
    ) -> torch.Tensor:
        mask, positions = self.scratch.add(nodes, parents, depths)
        return self.lm.forward(torch.tensor(tokens, dtype=torch.long), positions, mask)


class DraftModelDrafter:
    name = "draft_model"
    needs = DrafterNeeds()

    def __init__(self, lm: TreeLM, sample_children: bool = False) -> None:
        self.lm = lm
        self.sample_children = sample_children

    def begin(self) -> None:
        self.lm.truncate(0)

    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        tokens = context.tokens
        cached, total = self.lm.length, tokens.numel()
        if cached >= total:  # never happens in a well-formed loop: the root is always new
            self.lm.truncate(total - 1)
            cached = total - 1
        new = tokens[cached:]
        logits = self.lm.forward(new, torch.arange(cached, total), causal_extension_mask(cached, new.numel()))
        tree = grow_tree(
            int(tokens[-1]),
            logits[-1],
            LMScorer(self.lm, ScratchTree(total)),
            shape,
            params,
            rng,
            self.sample_children,
        )
        self.lm.truncate(total)
        return tree
