"""`Speculator`: the speculation core every runtime calls, for a whole batch at a time.

    speculator = Speculator(make_policy, make_drafter, acceptance)    # once per engine
    trees = speculator.draft([DraftRequest(...), ...])   # per request: plan a shape, draft (batched),
                                                         # then cost-aware sizing cuts the batch's trees
      ... the engine runs its target over the trees (tree attention, depth positions) ...
    verdicts = speculator.verify(trees, logits, starts, checks)       # accepted path, bonus, entropy
    speculator.observe(req_id, accepted, entropy, emitted)            # the policy and sizing learn
A plugin translates its engine's batch into these calls and back, and does the engine's plumbing
(positions, attention, accepted-KV moves, scheduler accounting). Per request the speculator keeps
the policy (the SAGE entropy EMA lives there), the drafter (its caches) and, for drafters that read
target features, the features of every committed position but the root. With a `Sizer` (budget
"auto") each request's budget, and the batch's trees after drafting, follow the measured latency
model and calibrated acceptance (`sagespec.common.sizing`); the runtime reports its step times to
`sizer.latency`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from .drafters import DraftContext, Drafter, EagleDrafter, ImageInputs
from .drafters.eagle import Drafting, all_drafted, run_drafting
from .feature_store import FeatureStore
from .policies import DecodeState, StepStats, TreePolicy, TreeShape, cap_shape
from .random_source import RandomSource, TorchRandom
from .sampling import SamplingParams, entropy
from .sizing import RequestBudget, Sizer
from .tree import DraftTree
from .verify import Accepted
from .verify.acceptance import Acceptance
from .verify.greedy import greedy_walk_argmax

GREEDY = SamplingParams()


def chain_of(shape: TreeShape, room: int | None = None) -> TreeShape:
    """The shape's main line as a chain, at most `room` tokens long."""
    depth = max(1, min(shape.depth, shape.budget, room if room is not None else shape.depth))
    return TreeShape(depth=depth, width=1, budget=depth)


@dataclass
class RequestState:
    policy: TreePolicy
    drafter: Drafter | None
    features: torch.Tensor | None = None  # target features of committed positions (drafters that read them)
    tokens: torch.Tensor | None = None  # committed tokens at the last draft (what the features are of)
    stored_rows: int = 0  # feature rows the feature store gave (positions a prefix cache served)
    images: ImageInputs | None = None
    last_shape: TreeShape | None = None
    last_drafted: int = 0
    steps: int = 0  # drafts proposed
    rng: RandomSource | None = None  # the request's own stream (engines that keep none themselves)
    budget: RequestBudget | None = None  # cost-aware sizing's budget for the request
    last_tree: DraftTree | None = None  # the tree proposed last, until its outcome is observed


@dataclass(frozen=True)
class DraftRequest:
    req_id: str
    tokens: torch.Tensor  # committed tokens; tokens[-1] is the tree's root
    params: SamplingParams = GREEDY  # what the drafter drafts with
    rng: RandomSource | None = None  # for drafters that sample (default: a fixed stream)
    room: int | None = None  # most drafted tokens the engine takes (None: any)
    chain_only: bool = False  # the engine verifies chains only for this request


@dataclass(frozen=True)
class VerifyCheck:
    """How one tree is verified: the request's sampling, its own generator, and the target's last
    hidden rows for rules that read them."""

    params: SamplingParams
    rng: RandomSource | None = None
    hidden: torch.Tensor | None = None


@dataclass(frozen=True)
class Verdict:
    accepted: Accepted
    emitted: list[int]  # accepted drafted tokens, then the bonus
    entropy: float  # target entropy (nats) at the last accepted node


class Speculator:
    def __init__(
        self,
        make_policy: Callable[[], TreePolicy],
        make_drafter: Callable[[], Drafter] | None,
        acceptance: Acceptance,
        sizer: Sizer | None = None,
        feature_store: FeatureStore | None = None,
    ) -> None:
        """`sizer`: cost-aware sizing (budget "auto"); None keeps the policy's fixed budget.
        `feature_store`: for engines with a prefix cache, where ended requests' features are kept
        for later requests whose prompts the cache serves."""
        self.make_policy, self.make_drafter, self.acceptance = make_policy, make_drafter, acceptance
        self.sizer = sizer
        self.feature_store = feature_store
        self.requests: dict[str, RequestState] = {}
        self.fallback_rng = TorchRandom(0)
        # Whether verdicts need the target's entropy (a softmax over the vocabulary per request).
        # A policy that does not say reads it.
        self.needs_entropy = bool(getattr(make_policy(), "reads_entropy", True))

    # ---- per-request state ---------------------------------------------------------------
    def state(self, req_id: str) -> RequestState:
        state = self.requests.get(req_id)
        if state is None:
            drafter = self.make_drafter() if self.make_drafter is not None else None
            if drafter is not None:
                drafter.begin()
            state = self.requests[req_id] = RequestState(self.make_policy(), drafter)
            if self.sizer is not None:
                state.budget = self.sizer.new_budget()
        return state

    def retain(self, live: Iterable[str]) -> None:
        """Forget every request not in `live` (finished or preempted); drafters that keep what
        requests leave behind (`end`) get it now."""
        for gone in set(self.requests) - set(live):
            state = self.requests.pop(gone)
            if self.feature_store is not None and state.features is not None and state.tokens is not None:
                self.feature_store.put(state.tokens, state.features[: state.tokens.numel()])
            if state.drafter is not None and hasattr(state.drafter, "end"):
                state.drafter.end()

    def commit_features(
        self, req_id: str, rows: torch.Tensor, start: int | None = None, tokens: torch.Tensor | None = None
    ) -> None:
        """Append the target features of newly committed positions; `start` (the position of the
        first row) first drops what a previous step had beyond it. Positions before `start` that
        never got features (an engine's prefix cache served them) get the feature store's rows for
        `tokens` (the request's tokens up to at least `start`) where it has them, zero rows
        elsewhere: drafts from zeros are worse, verification is unchanged."""
        state = self.state(req_id)
        kept = state.features if state.features is not None else rows[:0]
        if start is not None:
            kept = kept[:start]
            have = kept.shape[0]
            if have < start and self.feature_store is not None and tokens is not None:
                running = [
                    (other.tokens, other.features)
                    for rid, other in self.requests.items()
                    if rid != req_id and other.tokens is not None and other.features is not None
                ]
                stored = self.feature_store.rows(tokens, have, start, also=running)
                if stored is not None:
                    kept = torch.cat([kept, stored.to(rows.dtype)])
                    state.stored_rows += stored.shape[0]
            if kept.shape[0] < start:  # positions the engine never ran and no stored sequence had
                kept = torch.cat([kept, rows.new_zeros(start - kept.shape[0], rows.shape[-1])])
        state.features = torch.cat([kept, rows])

    def observe(self, req_id: str, accepted: int, entropy: float, emitted: Iterable[int] | None = None) -> None:
        """What the request's last verify did (`accepted` drafted tokens; the target's entropy where
        the bonus was sampled; `emitted`, the tokens it emitted, tells sizing which tree nodes were
        accepted); before its first draft, only the entropy counts."""
        state = self.state(req_id)
        tree, state.last_tree = state.last_tree, None
        if tree is not None and tree.num_drafted:
            emitted = self._emitted(tree, accepted, emitted)
            if emitted is not None:
                if self.sizer is not None:
                    self.sizer.observe(tree, emitted)
                if state.drafter is not None and hasattr(state.drafter, "observe_outcome"):
                    state.drafter.observe_outcome(tree, emitted)
        state.policy.observe(
            StepStats(
                shape=state.last_shape,
                num_nodes=state.last_drafted,
                accepted=accepted if state.last_shape is not None else 0,
                target_entropy=entropy,
            )
        )

    @staticmethod
    def _emitted(tree: DraftTree, accepted: int, emitted: Iterable[int] | None) -> list[int] | None:
        """The step's emitted tokens; for a chain they follow from `accepted` (-1 for the bonus)."""
        if emitted is not None:
            return list(emitted)
        if tree.max_depth == tree.num_drafted:  # a chain: its first nodes
            return [int(t) for t in tree.tokens[1 : accepted + 1]] + [-1]
        return None

    # ---- the step ----------------------------------------------------------------------
    def plan(self, request: DraftRequest) -> TreeShape | None:
        """The request's shape this step; None: sizing has it draft nothing."""
        state = self.state(request.req_id)
        budget = None if state.budget is None else Sizer.budget_for(state.budget)
        if state.budget is not None and budget is None:
            return None
        shape = state.policy.plan(DecodeState(step=state.steps, context_len=request.tokens.numel(), budget=budget))
        if budget is not None:
            shape = cap_shape(shape, budget)
        if request.chain_only or (request.room is not None and shape.budget > request.room):
            shape = chain_of(shape, request.room)
        return shape

    @torch.no_grad()
    def draft(
        self, requests: list[DraftRequest], decoding: int | None = None, base_tokens: int | None = None
    ) -> list[DraftTree]:
        """One tree per request (the root alone without a drafter). EAGLE drafters sharing a head run
        in lockstep: one head pass per tree level for all of them. Sizing, when on, reads the step:
        `decoding` requests emit a token (default: these), the forward runs `base_tokens` besides
        drafted nodes (default: one root each)."""
        start = time.perf_counter()
        slots: list[DraftTree | None] = [None] * len(requests)
        lockstep: list[int] = []
        jobs: list[Drafting] = []
        for i, request in enumerate(requests):
            state = self.state(request.req_id)
            if self.feature_store is not None:  # what the features will be stored under
                state.tokens = request.tokens
            state.last_shape = shape = self.plan(request)
            if state.drafter is None or shape is None:
                slots[i] = DraftTree.root_only(int(request.tokens[-1]))
                continue
            context = DraftContext(request.tokens, state.features, state.images)
            rng = request.rng or self.fallback_rng
            if type(state.drafter) is EagleDrafter:
                lockstep.append(i)
                jobs.append(state.drafter.drafting(context, shape, request.params, rng))
            else:
                slots[i] = state.drafter.propose(context, shape, request.params, rng)
        for i, tree in zip(lockstep, run_drafting(jobs)):
            slots[i] = tree
        trees = all_drafted(slots)
        if self.sizer is not None and requests:
            budgets: list[RequestBudget] = []
            for r in requests:
                budget = self.requests[r.req_id].budget
                assert budget is not None  # state() gives every request a budget when sizing is on
                budgets.append(budget)
            trees = self.sizer.size(
                trees,
                budgets,
                len(requests) if decoding is None else decoding,
                len(requests) if base_tokens is None else base_tokens,
                time.perf_counter() - start,
            )
        for request, tree in zip(requests, trees):
            state = self.requests[request.req_id]
            state.last_drafted, state.steps, state.last_tree = tree.num_drafted, state.steps + 1, tree
        return trees

    @staticmethod
    def _argmax_rows(spans: list[tuple[int, int]], logits: torch.Tensor) -> dict[int, list[int]]:
        """start -> the argmax of logits rows start .. start + n - 1, for each (start, n): one
        gather and one argmax over just those rows (the batch's other rows may be many)."""
        if not spans:
            return {}
        index = torch.cat([torch.arange(s, s + n) for s, n in spans]).to(logits.device)
        flat = logits.index_select(0, index).argmax(-1).tolist()
        out, offset = {}, 0
        for s, n in spans:
            out[s], offset = flat[offset : offset + n], offset + n
        return out

    @torch.no_grad()
    def verify(
        self, trees: list[DraftTree], logits: torch.Tensor, starts: list[int], checks: list[VerifyCheck]
    ) -> list[Verdict]:
        """Verifies tree i against logits rows starts[i] .. starts[i] + num_nodes - 1 (node order).
        Greedy trees under a lossless rule share one argmax over all rows; every other tree runs
        the acceptance rule with its request's own generator. Entropies, for a policy that reads
        them: one batched pass."""
        acceptance = self.acceptance
        greedy = [acceptance.lossless and c.params.greedy for c in checks]
        best = self._argmax_rows([(s, t.num_nodes) for s, t, g in zip(starts, trees, greedy) if g], logits)
        results = []
        for tree, start, check, is_greedy in zip(trees, starts, checks, greedy):
            if is_greedy:
                results.append(greedy_walk_argmax(tree, best[start]))
            else:
                rows = logits[start : start + tree.num_nodes].float()
                results.append(
                    acceptance.verify(tree, rows, check.params, check.rng or self.fallback_rng, check.hidden)
                )
        last_rows = [start + accepted.nodes[-1] for start, accepted in zip(starts, results)]
        if self.needs_entropy:
            entropies = entropy(logits[last_rows]).tolist() if last_rows else []
        else:
            entropies = [float("nan")] * len(results)
        return [
            Verdict(accepted, accepted.emitted(tree), entropy)
            for tree, accepted, entropy in zip(trees, results, entropies)
        ]
