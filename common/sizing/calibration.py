"""`AcceptanceCalibration`: each drafted node's chance of acceptance, from the drafter's own score,
calibrated online against what verification accepted (one per engine and drafter).

A node's score is the drafter's chance for its token given its parent (`conditional_scores`): the
draft distribution's probability for heads and draft models, the tree's `confidence` where a
drafter sets one (none does yet), else 1 / (sibling rank + 1) (the lookup drafters). Scores fall into bins;
each bin counts, over nodes whose parent was accepted, how many were accepted themselves (decayed,
so the estimate follows the text). A bin's rate blends its counts with a prior at the bin's score
(PRIOR_WEIGHT pseudo-observations). A node's value, its chance of being accepted, is the product
of its path's rates: never above its parent's, so the best nodes of a tree form a tree.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..tree import DraftTree

EDGES = np.array([0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 0.95, 1.0 + 1e-9])
PRIOR_WEIGHT = 2.0
DECAY = 0.995  # per verified tree: an estimate spans about the last 200 trees


def conditional_scores(tree: DraftTree) -> np.ndarray:
    """The drafter's chance for each node given its parent (node 0: 1)."""
    n = tree.num_nodes
    if tree.confidence is not None:
        out = tree.confidence.detach().float().cpu().numpy().astype(float)
    elif tree.draft_probs is not None and n > 1:
        parents, tokens = tree.parents[1:], tree.tokens[1:]
        q = tree.draft_probs
        out = np.concatenate([[1.0], q[parents.to(q.device), tokens.to(q.device)].float().cpu().numpy()])
    else:
        out = np.ones(n)
        for node in range(n):
            for rank, child in enumerate(tree.children(node)):
                out[child] = 1.0 / (rank + 1)
    out[0] = 1.0
    return np.clip(out, 0.0, 1.0)


class AcceptanceCalibration:
    def __init__(self) -> None:
        mids = (EDGES[:-1] + np.minimum(EDGES[1:], 1.0)) / 2
        self.prior = np.clip(mids, 0.01, 0.99)
        self.hits = np.zeros(len(mids))
        self.trials = np.zeros(len(mids))

    def bins(self, scores: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(EDGES, scores, side="right") - 1, 0, len(self.prior) - 1)

    def rates(self) -> np.ndarray:
        """Per bin: the chance a node is accepted when its parent was."""
        return (self.hits + PRIOR_WEIGHT * self.prior) / (self.trials + PRIOR_WEIGHT)

    def node_values(self, tree: DraftTree) -> np.ndarray:
        """Each node's chance of acceptance (node 0: 1), non-increasing along every path."""
        cond = self.rates()[self.bins(conditional_scores(tree))]
        parents = tree.parents.tolist()
        values = np.ones(tree.num_nodes)
        for i in range(1, tree.num_nodes):
            values[i] = values[parents[i]] * cond[i]
        return values

    def observe(self, tree: DraftTree, accepted_nodes: Iterable[int]) -> None:
        """A verified tree and the nodes (root first) on its accepted path."""
        if tree.num_nodes < 2:
            return
        accepted = np.zeros(tree.num_nodes, dtype=bool)
        accepted[list(accepted_nodes)] = True
        parents = tree.parents.numpy()
        tried = np.flatnonzero(accepted[parents[1:]]) + 1  # nodes whose parent was accepted
        bins = self.bins(conditional_scores(tree)[tried])
        self.hits *= DECAY
        self.trials *= DECAY
        np.add.at(self.trials, bins, 1.0)
        np.add.at(self.hits, bins, accepted[tried].astype(float))

    def summary(self) -> dict[str, float]:
        seen = self.trials > 0.5
        return {
            f"{EDGES[i]:.2f}-{min(EDGES[i + 1], 1.0):.2f}": round(float(r), 3)
            for i, r in enumerate(self.rates())
            if seen[i]
        }


def accepted_path(tree: DraftTree, emitted: Iterable[int]) -> list[int]:
    """The nodes (root first) a step accepted, found by walking the tree along the emitted tokens
    (accepted drafted tokens, then the bonus)."""
    node, path = 0, [0]
    for token in list(emitted)[:-1]:
        child = next((c for c in tree.children(node) if int(tree.tokens[c]) == int(token)), None)
        if child is None:
            break
        node = child
        path.append(node)
    return path
