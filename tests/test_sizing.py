"""Cost-aware sizing: the latency model, calibrated acceptance, the batch's tree sizes, and what a
Speculator with a sizer does over many steps (a drafter never accepted ends up drafting nothing; a
perfect one keeps growing its trees). Verification stays exact: sizing only picks which nodes go
to the verifier."""

import itertools
import types
from unittest import mock

import numpy as np
import pytest
import torch

import sagespec.common.speculator as speculator_module
from sagespec.common.policies import ChainPolicy, SagePolicy
from sagespec.common.sampling import SamplingParams
from sagespec.common.sizing import (
    AcceptanceCalibration,
    LatencyModel,
    RequestBudget,
    Sizer,
    accepted_path,
    conditional_scores,
)
from sagespec.common.speculator import DraftRequest, Speculator, VerifyCheck
from sagespec.common.tree import DraftTree
from sagespec.common.verify.acceptance import Acceptance

VOCAB = 32


def measured_latency(per_token: float, fixed: float = 1.0) -> LatencyModel:
    """A latency model measured on a machine where n tokens cost fixed + per_token * n."""
    model = LatencyModel()
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        model.observe_profile(n, fixed + per_token * n)
    return model


def test_latency_model_interpolates_its_profile_and_learns_what_steps_add():
    model = measured_latency(0.01)
    assert model.forward(1) == pytest.approx(1.01) and model.forward(64) == pytest.approx(1.64)
    assert model.forward(48) == pytest.approx(1.48)  # between measured sizes
    assert model.forward(512) == pytest.approx(1.0 + 0.01 * 512)  # beyond: the last slope
    assert np.all(np.diff(model.forward(np.arange(1, 300))) >= 0)  # never cheaper with more tokens
    assert model.step(10, trees=True) == model.step(10, trees=False)  # no step seen: trees cost alike
    for _ in range(80):
        model.observe_step(10, model.forward(10) + 0.3)
        model.observe_step(12, model.forward(12) + 0.5, trees=True)
        model.observe_overhead(0.05)
    assert model.offset(False) == pytest.approx(0.3, rel=0.01) and model.offset(True) == pytest.approx(0.5, rel=0.01)
    assert model.step(20, trees=True) == pytest.approx(model.forward(20) + 0.5 + 0.05, rel=0.01)
    model.observe_step(100_000, 1e6)  # far past the profile: ignored
    assert model.offset(False) == pytest.approx(0.3, rel=0.01)
    assert model.summary()["tree_samples"] == 80


def test_without_a_profile_plain_steps_are_the_forward():
    model = LatencyModel()
    for _ in range(3):
        model.observe_step(4, 2.0)
        model.observe_step(64, 5.0)
    assert model.forward(4) == pytest.approx(2.0) and model.offset(False) == 0.0
    model.observe_step(8, 3.0, trees=True)
    assert model.offset(True) == pytest.approx(3.0 - model.forward(8))


def test_latency_model_before_any_measurement_uses_a_unitless_prior():
    model = LatencyModel()
    assert model.forward(1) == 1.0 and model.forward(5) > model.forward(1)


def test_conditional_scores_come_from_each_drafter_kind():
    q = torch.zeros(3, VOCAB)
    q[0, 5], q[1, 6] = 0.8, 0.3
    head = DraftTree.from_parents([1, 5, 6], [-1, 0, 1], draft_probs=q)
    assert conditional_scores(head).tolist() == pytest.approx([1.0, 0.8, 0.3])
    lookup = DraftTree.from_parents([1, 5, 6, 7], [-1, 0, 0, 1])
    assert conditional_scores(lookup).tolist() == pytest.approx([1.0, 1.0, 0.5, 1.0])  # 1 / (sibling rank + 1)
    counted = DraftTree.from_parents([1, 5, 6], [-1, 0, 0], confidence=torch.tensor([1.0, 0.75, 0.25]))
    assert conditional_scores(counted).tolist() == pytest.approx([1.0, 0.75, 0.25])


def test_calibration_learns_observed_acceptance_and_values_fall_along_paths():
    calibration = AcceptanceCalibration()
    chain = DraftTree.chain(1, [2, 3, 4])
    before = calibration.node_values(chain)
    for _ in range(200):
        calibration.observe(chain, [0])  # the first node is always rejected
    after = calibration.node_values(chain)
    assert after[1] < 0.05 < before[1]
    assert all(a >= b for a, b in itertools.pairwise(after))
    assert accepted_path(DraftTree.from_parents([1, 5, 6, 7], [-1, 0, 0, 2]), [6, 7, 9]) == [0, 2, 3]


def test_sizing_keeps_trees_parents_first_and_shrinks_to_nothing_at_large_batches():
    rng = np.random.default_rng(0)
    trees = []
    for _ in range(16):
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, 10)]
        trees.append(DraftTree.from_parents(rng.integers(0, VOCAB, 10).tolist(), parents))
    cheap = Sizer(16, measured_latency(0.0005))
    cut = cheap.size(trees[:1], [RequestBudget(9)], 1, 1, 0.0)[0]
    assert 0 < cut.num_drafted <= 9  # a subtree: from_parents checked parents precede
    assert set(cut.tokens.tolist()) <= set(trees[0].tokens.tolist())
    # Compute-bound verify (every token costs as much as a step's fixed part): nobody speculates.
    costly = Sizer(16, measured_latency(1.0, fixed=0.1))
    assert all(t.num_drafted == 0 for t in costly.size(trees, [RequestBudget(9) for _ in trees], 16, 16, 0.0))
    assert costly.last_rates[0] == costly.last_rates[1]


def test_sampled_children_are_verified_whole():
    q = torch.full((3, VOCAB), 1.0 / VOCAB)
    tree = DraftTree.from_parents([1, 5, 6], [-1, 0, 0], draft_probs=q, sampled_children=True)
    budget = RequestBudget(2)
    out = Sizer(8, measured_latency(1.0)).size([tree], [budget], 1, 1, 0.0)[0]
    assert out is tree  # not cut by its own sampled values
    assert budget.skip > 0  # but it drafts nothing the next step


class FixedLine:
    """A stand-in target: after token t it always says (3 t + 1) mod VOCAB."""

    @staticmethod
    def next(token: int) -> int:
        return (3 * token + 1) % VOCAB

    def logits(self, tree: DraftTree) -> torch.Tensor:
        out = torch.zeros(tree.num_nodes, VOCAB)
        for i, tok in enumerate(tree.tokens.tolist()):
            out[i, self.next(tok)] = 10.0
        return out


class LineDrafter:
    """Drafts chains along the stand-in's line (`right`) or one token off it everywhere."""

    def __init__(self, right: bool):
        self.right = right

    def begin(self):
        pass

    def propose(self, context, shape, params, rng):
        tokens, tok = [], int(context.tokens[-1])
        for _ in range(shape.depth):
            tok = FixedLine.next(tok) if self.right else (FixedLine.next(tok) + 1) % VOCAB
            tokens.append(tok)
        return DraftTree.chain(int(context.tokens[-1]), tokens)


def decode(drafter, steps: int, latency: LatencyModel, max_budget: int = 16):
    """Drives a Speculator with a sizer for `steps` greedy steps; returns (drafted nodes per step,
    emitted tokens per step)."""
    sizer = Sizer(max_budget, latency)
    speculator = Speculator(lambda: ChainPolicy(depth=max_budget), lambda: drafter, Acceptance("auto"), sizer)
    line, target, nodes, emitted = [3], FixedLine(), [], []
    # Drafting is timed on a fixed clock (0.5 ms a draft call), so the sizer's choices do not follow
    # this machine's noise.
    ticks = itertools.count()
    clock = types.SimpleNamespace(perf_counter=lambda: next(ticks) * 0.0005)
    for _ in range(steps):
        with mock.patch.object(speculator_module, "time", clock):
            tree = speculator.draft([DraftRequest("r", torch.tensor(line))])[0]
        verdict = speculator.verify([tree], target.logits(tree), [0], [VerifyCheck(SamplingParams())])[0]
        speculator.observe("r", verdict.accepted.num_drafted_accepted, 0.0, verdict.emitted)
        line += verdict.emitted
        nodes.append(tree.num_drafted)
        emitted.append(len(verdict.emitted))
    expected = [3]
    while len(expected) < len(line):
        expected.append(FixedLine.next(expected[-1]))
    assert line == expected  # lossless whatever was drafted
    return nodes, emitted


def test_a_drafter_never_accepted_ends_up_drafting_nothing():
    nodes, emitted = decode(LineDrafter(right=False), 300, measured_latency(0.02))
    assert sum(nodes[:20]) > 0  # it was tried
    assert sum(nodes[150:]) == 0  # and then left alone
    assert all(e == 1 for e in emitted)


def test_a_perfect_drafter_keeps_growing_its_trees():
    nodes, emitted = decode(LineDrafter(right=True), 12, measured_latency(0.02), max_budget=16)
    assert nodes[0] == 8 and nodes[-1] == 16 and nodes == sorted(nodes)
    assert emitted[-1] == 17


def test_sage_policy_shapes_within_the_step_budget():
    sizer = Sizer(16, measured_latency(0.02), start_budget=4)
    speculator = Speculator(lambda: SagePolicy(budget=16), None, Acceptance("auto"), sizer)
    shape = speculator.plan(DraftRequest("r", torch.tensor([1, 2])))
    assert shape.budget == 4 and shape.depth * shape.width <= 4 * 2
