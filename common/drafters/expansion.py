"""Growing a draft tree from a model that scores tree nodes (draft LM or feature head).

Two ways, chosen by the shape:
- dynamic (EAGLE-2): expand the `width` best frontier nodes by their `width` best children for
  `depth` levels; then keep the `budget` best candidates by path log-probability. A child never
  outscores its parent and ties keep creation order, so the kept set is a connected tree.
- by rank paths (static trees; and every shape when children are sampled): the topology is fixed
  before drafting; rank r means the r-th most probable token, or the r-th i.i.d. sample from q.
Only nodes that get children are run through the model (`NodeScorer.score`).
"""
from __future__ import annotations

from typing import Protocol, Sequence

import torch

from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams, process_logits
from ..tree import DraftTree


class NodeScorer(Protocol):
    def score(self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int],
              depths: Sequence[int]) -> torch.Tensor:
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


def grow_tree(root_token: int, root_logits: torch.Tensor, scorer: NodeScorer, shape: TreeShape,
              params: SamplingParams, rng: RandomSource, sample_children: bool = False) -> DraftTree:
    if sample_children and not params.greedy:
        return _grow_by_paths(root_token, root_logits, scorer, shape.paths or comb_paths(shape),
                              params, rng, sampled=True)
    if shape.paths is not None:
        return _grow_by_paths(root_token, root_logits, scorer, shape.paths, params, rng, sampled=False)
    return _grow_dynamic(root_token, root_logits, scorer, shape, params)


def _draft_dist(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    # Deterministic children rank by the draft's own probabilities (temperature 1 when greedy).
    return process_logits(logits, params if not params.greedy else SamplingParams(temperature=1.0))


def _grow_dynamic(root_token, root_logits, scorer, shape, params) -> DraftTree:
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
            for lp, tok in zip(lps, toks):
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
            logits = scorer.score(frontier, [tokens[i] for i in frontier],
                                  [parents[i] for i in frontier], [depths[i] for i in frontier])
            for i, row in zip(frontier, _draft_dist(logits, params)):
                dist[i] = row
    # Rerank: best `budget` drafted nodes by path score; stable sort keeps parents first on ties.
    order = sorted(range(1, len(tokens)), key=lambda i: -scores[i])[: shape.budget]
    keep = [0] + sorted(order)
    remap = {old: new for new, old in enumerate(keep)}
    q = torch.zeros(len(keep), root_logits.shape[-1], dtype=dist[0].dtype)
    for old, new in remap.items():
        if old in dist:
            q[new] = dist[old]
    return DraftTree.from_parents([tokens[i] for i in keep],
                                  [-1] + [remap[parents[i]] for i in keep[1:]], draft_probs=q)


def _grow_by_paths(root_token, root_logits, scorer, paths, params, rng, sampled: bool) -> DraftTree:
    """Nodes are created level by level in rank order; `paths` is prefix-closed and sorted."""
    index = {(): 0}
    tokens, parents, depths = [root_token], [-1], [0]
    dist = {0: process_logits(root_logits, params) if sampled else _draft_dist(root_logits, params)}
    expand = {p[:-1] for p in paths}
    max_len = max(len(p) for p in paths)
    for level in range(1, max_len + 1):
        level_paths = [p for p in paths if len(p) == level]
        by_parent: dict[tuple, list[tuple]] = {}
        for p in level_paths:
            by_parent.setdefault(p[:-1], []).append(p)
        for parent_path, kids in by_parent.items():
            if parent_path not in index:  # the parent's rank was past the vocabulary's support
                continue
            par = index[parent_path]
            q = dist[par]
            n = max(p[-1] for p in kids) + 1
            if sampled:
                drawn = [rng.choice(q) for _ in range(n)]
            else:
                drawn = torch.topk(q, min(n, q.numel())).indices.tolist()
            for p in sorted(kids):
                if p[-1] >= len(drawn):
                    continue
                index[p] = len(tokens)
                tokens.append(drawn[p[-1]])
                parents.append(par)
                depths.append(level)
        to_score = [index[p] for p in level_paths if p in index and p in expand]
        if to_score:
            logits = scorer.score(to_score, [tokens[i] for i in to_score],
                                  [parents[i] for i in to_score], [depths[i] for i in to_score])
            for i, row in zip(to_score, logits):
                dist[i] = process_logits(row, params) if sampled else _draft_dist(row, params)
    q = torch.zeros(len(tokens), root_logits.shape[-1], dtype=dist[0].dtype)
    for i, row in dist.items():
        q[i] = row
    return DraftTree.from_parents(tokens, parents, draft_probs=q, sampled_children=sampled)
