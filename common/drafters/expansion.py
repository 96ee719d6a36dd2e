"""Growing a draft tree from a model that scores tree nodes (draft LM or feature head).

Two ways, chosen by the shape:
- dynamic (EAGLE-2): expand the `width` best frontier nodes by their `width` best children for
  `depth` levels; then keep the `budget` best candidates by path log-probability. A child never
  outscores its parent and ties keep creation order, so the kept set is a connected tree.
- by rank paths (static trees; and every shape when children are sampled): the topology is fixed
  before drafting; rank r means the r-th most probable token, or the r-th i.i.d. sample from q.
Only nodes that get children are run through the model. Growth is a generator (`growth`): it
yields each level's `ScoreRequest` and is sent back that level's logits, so one driver can run
many requests' growths in lockstep with one batched model call per level (`grow_tree` drives one
growth with a `NodeScorer`). Logits may cover a reduced draft vocabulary: `token_ids[j]` is the
target token of column j (None: columns are target tokens); trees and `draft_probs` are always in
the target's vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams, process_logits
from ..tree import DraftTree


@dataclass(frozen=True)
class ScoreRequest:
    """New tree nodes to score (ids in creation order; the root is node 0, scored by the drafter
    itself; parents are earlier node ids)."""

    nodes: list[int]
    tokens: list[int]
    parents: list[int]
    depths: list[int]


Growth = Generator[ScoreRequest, torch.Tensor, DraftTree]


class NodeScorer(Protocol):
    def score(
        self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int]
    ) -> torch.Tensor:
        """Next-token logits [len(nodes), V] for new tree nodes (ids in creation order, the root
        is node 0 and was scored by the drafter itself; parents are earlier node ids)."""


def comb_paths(shape: TreeShape) -> tuple[tuple[int, ...], ...]:
    """The fixed topology used for sampled children: a main line of `depth` first children, each
    line node with `width - 1` extra siblings, cut to `budget` nodes in breadth-first order."""
    paths = []
    for d in range(shape.depth):
        for r in range(shape.width):
            paths.append((0,) * d + (r,))
    paths.sort(key=lambda p: (len(p), p))
    return tuple(paths[: shape.budget])


def growth(
    root_token: int,
    root_logits: torch.Tensor,
    shape: TreeShape,
    params: SamplingParams,
    rng: RandomSource,
    sample_children: bool = False,
    token_ids: torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> Growth:
    """The tree growth for one request; `vocab_size` is the target's (needed with `token_ids`)."""
    size = vocab_size if token_ids is not None else root_logits.shape[-1]
    if size is None:
        raise ValueError("growth: token_ids (a draft vocabulary) needs the target's vocab_size")
    vocab = _Vocab(token_ids, size)
    if sample_children and not params.greedy:
        return _grow_by_paths(
            root_token, root_logits, shape.paths or comb_paths(shape), params, rng, vocab, sampled=True
        )
    if shape.paths is not None:
        return _grow_by_paths(root_token, root_logits, shape.paths, params, rng, vocab, sampled=False)
    return _grow_dynamic(root_token, root_logits, shape, params, vocab)


def drive(grow: Growth, score: Callable[[ScoreRequest], torch.Tensor]) -> DraftTree:
    """Runs one growth to its tree; `score(ScoreRequest) -> logits [len(nodes), draft vocab]`."""
    try:
        request = next(grow)
        while True:
            request = grow.send(score(request))
    except StopIteration as done:
        return done.value


def grow_tree(
    root_token: int,
    root_logits: torch.Tensor,
    scorer: NodeScorer,
    shape: TreeShape,
    params: SamplingParams,
    rng: RandomSource,
    sample_children: bool = False,
    token_ids: torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> DraftTree:
    return drive(
        growth(root_token, root_logits, shape, params, rng, sample_children, token_ids, vocab_size),
        lambda r: scorer.score(r.nodes, r.tokens, r.parents, r.depths),
    )


@dataclass(frozen=True)
class _Vocab:
    token_ids: torch.Tensor | None  # draft column -> target token; None: the same ids
    size: int  # the target's vocabulary

    def tokens(self, columns: list[int]) -> list[int]:
        return columns if self.token_ids is None else self.token_ids[columns].tolist()

    def full_rows(self, rows: dict[int, torch.Tensor], order: list[int]) -> torch.Tensor:
        """[len(order), target vocab]: the rows of `order` (zeros where a node has none)."""
        dtype = next(iter(rows.values())).dtype
        q = torch.zeros(len(order), self.size, dtype=dtype)
        for new, old in enumerate(order):
            if old in rows:
                if self.token_ids is None:
                    q[new] = rows[old]
                else:
                    q[new, self.token_ids] = rows[old]
        return q


def _draft_dist(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    # Deterministic children rank by the draft's own probabilities (temperature 1 when greedy).
    return process_logits(logits, params if not params.greedy else SamplingParams(temperature=1.0))


def _grow_dynamic(
    root_token: int, root_logits: torch.Tensor, shape: TreeShape, params: SamplingParams, vocab: _Vocab
) -> Growth:
    """Each level costs one batched softmax, log and top-k over the whole frontier (row-wise ops:
    the same values as one row at a time)."""
    k = shape.width
    tokens, parents, depths = [root_token], [-1], [0]
    scores = [0.0]
    dist = {0: _draft_dist(root_logits, params)}
    frontier = [0]
    for level in range(shape.depth):
        rows = torch.stack([dist[f] for f in frontier])
        top = torch.topk(torch.log(rows.clamp_min(1e-30)), min(k, rows.shape[-1]), dim=-1)
        cand = []  # (score, parent, token)
        for f, lps, toks in zip(frontier, top.values.tolist(), top.indices.tolist()):
            for lp, tok in zip(lps, vocab.tokens(toks)):
                if lp > -60.0:  # skip tokens the draft gives no mass (top-k/top-p cut)
                    cand.append((scores[f] + lp, f, tok))
        if not cand:
            break
        cand.sort(key=lambda c: -c[0])
        new_ids = []
        for s, par, tok in cand:
            new_ids.append(len(tokens))
            tokens.append(tok)
            parents.append(par)
            depths.append(depths[par] + 1)
            scores.append(s)
        frontier = new_ids[:k]
        if level + 1 < shape.depth:
            logits = yield ScoreRequest(
                frontier, [tokens[i] for i in frontier], [parents[i] for i in frontier], [depths[i] for i in frontier]
            )
            for i, row in zip(frontier, _draft_dist(logits, params)):
                dist[i] = row
    # Rerank: best `budget` drafted nodes by path score; stable sort keeps parents first on ties.
    order = sorted(range(1, len(tokens)), key=lambda i: -scores[i])[: shape.budget]
    keep = [0] + sorted(order)
    remap = {old: new for new, old in enumerate(keep)}
    return DraftTree.from_parents(
        [tokens[i] for i in keep], [-1] + [remap[parents[i]] for i in keep[1:]], draft_probs=vocab.full_rows(dist, keep)
    )


def _grow_by_paths(
    root_token: int,
    root_logits: torch.Tensor,
    paths: Sequence[tuple[int, ...]],
    params: SamplingParams,
    rng: RandomSource,
    vocab: _Vocab,
    sampled: bool,
) -> Growth:
    """Nodes are created level by level in rank order; `paths` is prefix-closed and sorted."""
    index: dict[tuple[int, ...], int] = {(): 0}
    tokens, parents, depths = [root_token], [-1], [0]
    dist = {0: process_logits(root_logits, params) if sampled else _draft_dist(root_logits, params)}
    expand = {p[:-1] for p in paths}
    max_len = max(len(p) for p in paths)
    for level in range(1, max_len + 1):
        level_paths = [p for p in paths if len(p) == level]
        by_parent: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for p in level_paths:
            by_parent.setdefault(p[:-1], []).append(p)
        for parent_path, kids in by_parent.items():
            if parent_path not in index:  # the parent's rank was past the vocabulary's support
                continue
            par = index[parent_path]
            q = dist[par]
            n = max(p[-1] for p in kids) + 1
            if sampled:
                drawn = vocab.tokens([rng.choice(q) for _ in range(n)])
            else:
                drawn = vocab.tokens(torch.topk(q, min(n, q.numel())).indices.tolist())
            for p in sorted(kids):
                if p[-1] >= len(drawn):
                    continue
                index[p] = len(tokens)
                tokens.append(drawn[p[-1]])
                parents.append(par)
                depths.append(level)
        to_score = [index[p] for p in level_paths if p in index and p in expand]
        if to_score:
            logits = yield ScoreRequest(
                to_score, [tokens[i] for i in to_score], [parents[i] for i in to_score], [depths[i] for i in to_score]
            )
            for i, row in zip(to_score, logits):
                dist[i] = process_logits(row, params) if sampled else _draft_dist(row, params)
    return DraftTree.from_parents(
        tokens, parents, draft_probs=vocab.full_rows(dist, list(range(len(tokens)))), sampled_children=sampled
    )
