"""The EAGLE drafter: an EagleHead fed with the target's features of committed positions.

Between steps the head's cache holds one entry per committed pair (feature t, token t+1) for
t < L, where L + 1 is the committed length (the root, token L, pairs with feature L - 1). Tree
nodes pair their parent's head output with their own token; they live in scratch slots that are
dropped after drafting.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import torch

from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds
from .eagle_head import EagleHead, HeadCall
from .expansion import ScoreRequest, growth
from .tree_lm import ScratchTree, causal_extension_mask


def committed_features(context: DraftContext, drafter: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(tokens, features, committed pairs L): features must cover every committed position but the root."""
    tokens, feats = context.tokens, context.hidden_states
    committed_pairs = tokens.numel() - 1
    if feats is None or feats.shape[0] != committed_pairs:
        raise ValueError(
            f"{drafter} drafter needs target features for all {committed_pairs} committed "
            f"positions before the root; got {None if feats is None else feats.shape[0]}"
        )
    return tokens, feats, committed_pairs


class HeadScorer:
    """Scores tree nodes with the head: a node pairs its parent's output hidden state with its own
    token. `refine` (hidden -> hidden) post-processes every output, e.g. a vision injection."""

    def __init__(
        self,
        head: EagleHead,
        scratch: ScratchTree,
        root_hidden: torch.Tensor,
        refine: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.head, self.scratch, self.refine = head, scratch, refine
        self.hidden = {0: root_hidden}

    def call(self, request: ScoreRequest) -> HeadCall:
        """The head pass that scores `request`'s nodes."""
        mask, positions = self.scratch.add(request.nodes, request.parents, request.depths)
        feats = torch.stack([self.hidden[p] for p in request.parents])
        return HeadCall(self.head, torch.tensor(request.tokens, dtype=torch.long), feats, positions, mask)

    def keep(self, request: ScoreRequest, out: torch.Tensor) -> None:
        for n, h in zip(request.nodes, out):
            self.hidden[n] = h

    def score(
        self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int]
    ) -> torch.Tensor:
        request = ScoreRequest(list(nodes), list(tokens), list(parents), list(depths))
        out = self.head.hidden_step_many([self.call(request)])[0]
        if self.refine is not None:
            out = self.refine(out)
        self.keep(request, out)
        return self.head.logits(out)


# A drafting coroutine yields the head passes it needs and is sent back (output hidden, draft-vocab
# logits) for each; it returns its tree. Many run in lockstep with one batched head pass per round.
Drafting = Generator[HeadCall, tuple[torch.Tensor, torch.Tensor], DraftTree]


@torch.no_grad()
def run_drafting(jobs: list[Drafting]) -> list[DraftTree]:
    """Runs drafting coroutines that share one head's weights to their trees: each round, one
    `hidden_step_many` and one output layer over every coroutine's pending pass."""
    trees: list[DraftTree | None] = [None] * len(jobs)
    pending: dict[int, HeadCall] = {}

    def advance(i: int, sent: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        try:
            pending[i] = next(jobs[i]) if sent is None else jobs[i].send(sent)
        except StopIteration as done:
            pending.pop(i, None)
            trees[i] = done.value

    for i in range(len(jobs)):
        advance(i)
    while pending:
        order = list(pending)
        calls = [pending[i] for i in order]
        outs = EagleHead.hidden_step_many(calls)
        rows = [out[-1:] if call.last_only else out for call, out in zip(calls, outs)]
        logits = calls[0].head.draft_logits(torch.cat(rows)).split([r.shape[0] for r in rows])
        for i, out, row_logits in zip(order, outs, logits):
            advance(i, (out, row_logits))
    return all_drafted(trees)


def all_drafted(trees: list[DraftTree | None]) -> list[DraftTree]:
    """`trees` once every slot has been filled."""
    out = [t for t in trees if t is not None]
    assert len(out) == len(trees), "a request was left without a tree"
    return out


class EagleDrafter:
    name = "eagle"

    def __init__(self, head: EagleHead, sample_children: bool = False) -> None:
        self.head = head
        self.sample_children = sample_children
        self.needs = DrafterNeeds(hidden_states=True, hidden_layer_ids=head.config.target_layer_ids)

    def begin(self) -> None:
        self.head.reset_cache()

    @torch.no_grad()
    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        return run_drafting([self.drafting(context, shape, params, rng)])[0]

    def drafting(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> Drafting:
        """`propose` as a coroutine (see `run_drafting`); logits stay in the head's draft vocabulary."""
        tokens, feats, committed_pairs = committed_features(context, "eagle")
        m = min(self.head.cache_length, committed_pairs - 1)
        self.head.truncate(m)
        new = committed_pairs - m
        out, logits = yield HeadCall(
            self.head,
            tokens[m + 1 :],
            self.head.fuse(feats[m:]),
            torch.arange(m + 1, committed_pairs + 1),
            causal_extension_mask(m, new),
            last_only=True,
        )
        scorer = HeadScorer(self.head, ScratchTree(committed_pairs, root_position=committed_pairs), out[-1])
        grow = growth(
            int(tokens[-1]),
            logits[-1],
            shape,
            params,
            rng,
            self.sample_children,
            self.head.draft_token_ids,
            self.head.config.vocab_size,
        )
        try:
            request = next(grow)
            while True:
                out, logits = yield scorer.call(request)
                scorer.keep(request, out)
                request = grow.send(logits)
        except StopIteration as done:
            tree = done.value
        self.head.truncate(committed_pairs)
        return tree
