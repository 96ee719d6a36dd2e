"""DraftTree: the token tree one speculative step proposes, and its derived views.

Node 0 is the root: the last accepted token, whose KV is not yet in the target's cache. Every
other node is a drafted token. Invariants, checked once at construction:
  parents[0] == -1, 0 <= parents[i] < i for i > 0 (parents precede children, one root),
  depths[0] == 0, depths[i] == depths[parents[i]] + 1.
`draft_probs[i]`, when given, is the draft distribution over node i's children (already processed
with the request's sampling parameters); rows of nodes without children are not read.
`sampled_children` says the children of each node were drawn i.i.d. from that row; otherwise the
drafter chose them deterministically (top-k, lookup), and verification treats q as one-hot.
`confidence[i]`, when given, is the drafter's own chance for node i given its parent (meant for a
lookup drafter's continuation share; no drafter sets it yet; node 0: 1); sizing reads it (`conditional_scores`), verification never.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


class TreeError(ValueError):
    """A DraftTree's fields violate its invariants."""


@dataclass(frozen=True, eq=False)
class DraftTree:
    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    draft_probs: torch.Tensor | None = None
    sampled_children: bool = False
    confidence: torch.Tensor | None = None
    _children: tuple[tuple[int, ...], ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        tokens, parents, depths = self.tokens, self.parents, self.depths
        for name, t in (("tokens", tokens), ("parents", parents), ("depths", depths)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype != torch.long:
                raise TreeError(f"DraftTree.{name} must be a 1-D int64 tensor")
        n = tokens.numel()
        if n < 1 or parents.numel() != n or depths.numel() != n:
            raise TreeError(
                f"DraftTree needs >= 1 node and equal lengths; got tokens={n}, "
                f"parents={parents.numel()}, depths={depths.numel()}"
            )
        if bool((tokens < 0).any()):
            raise TreeError("DraftTree.tokens must be non-negative token ids")
        p = parents.tolist()
        d = depths.tolist()
        if p[0] != -1 or d[0] != 0:
            raise TreeError("DraftTree node 0 is the root: parents[0] must be -1 and depths[0] 0")
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            if not 0 <= p[i] < i:
                raise TreeError(f"DraftTree.parents[{i}]={p[i]}: a parent must precede its child")
            if d[i] != d[p[i]] + 1:
                raise TreeError(f"DraftTree.depths[{i}]={d[i]} but its parent's depth is {d[p[i]]}")
            children[p[i]].append(i)
        if self.draft_probs is not None:
            q = self.draft_probs
            if q.dim() != 2 or q.shape[0] != n:
                raise TreeError(f"DraftTree.draft_probs must be [num_nodes={n}, vocab]; got {tuple(q.shape)}")
            if bool((q < 0).any()) or not bool(torch.isfinite(q).all()):
                raise TreeError("DraftTree.draft_probs must be finite and non-negative")
        if self.confidence is not None and (self.confidence.dim() != 1 or self.confidence.numel() != n):
            raise TreeError(f"DraftTree.confidence must be [num_nodes={n}]; got {tuple(self.confidence.shape)}")
        if self.sampled_children and self.draft_probs is None:
            raise TreeError("DraftTree.sampled_children needs draft_probs (the distribution sampled from)")
        object.__setattr__(self, "_children", tuple(tuple(c) for c in children))

    # ---- constructors -------------------------------------------------------------------
    @classmethod
    def from_parents(cls, tokens: Sequence[int], parents: Sequence[int], **kw: Any) -> DraftTree:
        depths = [0] * len(parents)
        for i in range(1, len(parents)):
            if not 0 <= parents[i] < i:
                raise TreeError(f"DraftTree.parents[{i}]={parents[i]}: a parent must precede its child")
            depths[i] = depths[parents[i]] + 1
        return cls(
            torch.tensor(list(tokens), dtype=torch.long),
            torch.tensor(list(parents), dtype=torch.long),
            torch.tensor(depths, dtype=torch.long),
            **kw,
        )

    @classmethod
    def root_only(cls, root_token: int) -> DraftTree:
        return cls.from_parents([root_token], [-1])

    @classmethod
    def chain(cls, root_token: int, tokens: Sequence[int], **kw: Any) -> DraftTree:
        return cls.from_parents([root_token, *tokens], list(range(-1, len(tokens))), **kw)

    @classmethod
    def from_token_paths(
        cls, root_token: int, paths: Sequence[Sequence[int]], max_nodes: int | None = None
    ) -> DraftTree:
        """Merge token sequences (continuations of the root) into a trie; nodes in first-seen order.
        With max_nodes, nodes past that count (drafted nodes, root excluded) are dropped; since a
        parent is always seen before its children, the kept set stays a tree."""
        tokens, parents = [root_token], [-1]
        index: dict[tuple[int, int], int] = {}
        for path in paths:
            node = 0
            for tok in path:
                key = (node, int(tok))
                if key not in index:
                    if max_nodes is not None and len(tokens) - 1 >= max_nodes:
                        break
                    index[key] = len(tokens)
                    tokens.append(int(tok))
                    parents.append(node)
                node = index[key]
        return cls.from_parents(tokens, parents)

    # ---- derived views ------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self.tokens.numel()

    @property
    def num_drafted(self) -> int:
        return self.tokens.numel() - 1

    @property
    def max_depth(self) -> int:
        return int(self.depths.max())

    def children(self, node: int) -> tuple[int, ...]:
        return self._children[node]

    def ancestor_mask(self) -> torch.Tensor:
        """[n, n] bool: mask[i, j] is True iff j is i or an ancestor of i (what node i attends to)."""
        n = self.num_nodes
        mask = torch.zeros(n, n, dtype=torch.bool)
        parents = self.parents.tolist()
        for i in range(n):
            if i:
                mask[i] = mask[parents[i]]
            mask[i, i] = True
        return mask

    def attention_mask(self, prefix_len: int) -> torch.Tensor:
        """[n, prefix_len + n] bool: each node sees the whole cached prefix and its own ancestors."""
        n = self.num_nodes
        mask = torch.ones(n, prefix_len + n, dtype=torch.bool)
        mask[:, prefix_len:] = self.ancestor_mask()
        return mask

    def key_positions(self, prefix_len: int) -> torch.Tensor:
        """[prefix_len + n] the position of every key a verify reads: the prefix's, then each node's."""
        return torch.cat([torch.arange(prefix_len), self.positions(prefix_len)])

    def positions(self, prefix_len: int) -> torch.Tensor:
        """RoPE positions: the root sits right after the cached prefix, each node at prefix + depth."""
        return self.depths + prefix_len

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to `node`, both included."""
        path, parents = [], self.parents.tolist()
        while node != -1:
            path.append(node)
            node = parents[node]
        return path[::-1]

    def leaves(self) -> list[int]:
        return [i for i in range(self.num_nodes) if not self._children[i]]

    def root_to_leaf_paths(self) -> list[list[int]]:
        return [self.path_to(leaf) for leaf in self.leaves()]

    def first_child_next_sibling(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-child/right-sibling encoding (-1 where none), the layout tree kernels walk."""
        n = self.num_nodes
        first = torch.full((n,), -1, dtype=torch.long)
        nxt = torch.full((n,), -1, dtype=torch.long)
        for i, kids in enumerate(self._children):
            if kids:
                first[i] = kids[0]
                for a, b in itertools.pairwise(kids):
                    nxt[a] = b
        return first, nxt

    def rank_paths(self) -> list[tuple[int, ...]]:
        """For every drafted node, the sibling ranks from the root down to it (static-tree form)."""
        ranks: list[tuple[int, ...]] = [()] * self.num_nodes
        for i, kids in enumerate(self._children):
            for r, c in enumerate(kids):
                ranks[c] = ranks[i] + (r,)
        return ranks[1:]

    def to(self, device: torch.device | str) -> DraftTree:
        q = None if self.draft_probs is None else self.draft_probs.to(device)
        return DraftTree(
            self.tokens.to(device),
            self.parents.to(device),
            self.depths.to(device),
            q,
            self.sampled_children,
            None if self.confidence is None else self.confidence.to(device),
        )

    def subtree(self, keep: Sequence[int]) -> DraftTree:
        """The tree of the listed nodes (the root and, for each, its parent must be listed), in
        their original order; draft rows and confidences follow their nodes."""
        keep = sorted({int(i) for i in keep})
        if len(keep) == self.num_nodes:
            return self
        if not keep or keep[0] != 0:
            raise TreeError("DraftTree.subtree must keep the root")
        remap = {old: new for new, old in enumerate(keep)}
        parents = self.parents.tolist()
        try:
            new_parents = [-1] + [remap[parents[i]] for i in keep[1:]]
        except KeyError as e:
            raise TreeError(f"DraftTree.subtree keeps a node whose parent {e.args[0]} it drops") from None
        index = torch.tensor(keep, dtype=torch.long)

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[index.to(t.device)]

        return DraftTree.from_parents(
            self.tokens[index].tolist(),
            new_parents,
            draft_probs=pick(self.draft_probs),
            sampled_children=self.sampled_children,
            confidence=pick(self.confidence),
        )


@dataclass(frozen=True, eq=False)
class RaggedTrees:
    """A batch of trees flattened the way FlashInfer and the engines lay out variable-length work:
    request r owns rows indptr[r]:indptr[r+1] of tokens/depths; parents stay request-local."""

    trees: tuple[DraftTree, ...]
    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    indptr: torch.Tensor

    @classmethod
    def from_trees(cls, trees: Sequence[DraftTree]) -> RaggedTrees:
        if not trees:
            raise TreeError("RaggedTrees needs at least one tree")
        sizes = torch.tensor([t.num_nodes for t in trees], dtype=torch.long)
        indptr = torch.zeros(len(trees) + 1, dtype=torch.long)
        indptr[1:] = torch.cumsum(sizes, 0)
        return cls(
            tuple(trees),
            torch.cat([t.tokens for t in trees]),
            torch.cat([t.parents for t in trees]),
            torch.cat([t.depths for t in trees]),
            indptr,
        )

    def __len__(self) -> int:
        return len(self.trees)

    def positions(self, prefix_lens: Sequence[int]) -> torch.Tensor:
        return torch.cat([t.positions(int(p)) for t, p in zip(self.trees, prefix_lens)])

    def attention_mask(self, prefix_lens: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """FlashInfer's custom-mask layout: each request's [q_len x kv_len] block row-major,
        concatenated (kv_len counts the prefix); returns (flat bool mask, mask_indptr)."""
        blocks = [t.attention_mask(int(p)).flatten() for t, p in zip(self.trees, prefix_lens)]
        indptr = torch.zeros(len(blocks) + 1, dtype=torch.long)
        indptr[1:] = torch.cumsum(torch.tensor([b.numel() for b in blocks], dtype=torch.long), 0)
        return torch.cat(blocks), indptr


def within_window(query_positions: torch.Tensor, key_positions: torch.Tensor, window: int) -> torch.Tensor:
    """[q, k] bool: key k lies in query q's sliding window of `window` tokens ending at q itself
    (q - k < window). AND it with a tree mask: within a tree, positions are prefix + depth."""
    return (query_positions[:, None] - key_positions[None, :]) < window
