"""The batch-level speculation core: verifying many trees at once equals verifying each alone;
per-request state is kept, planned within the engine's room, and forgotten when a request ends."""

import pytest
import torch

from sagespec.common.drafters import NgramDrafter
from sagespec.common.policies import ChainPolicy, DynamicPolicy, SagePolicy, TreeShape
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams, entropy
from sagespec.common.speculator import DraftRequest, Speculator, VerifyCheck, chain_of
from sagespec.common.tree import DraftTree
from sagespec.common.verify import verify
from sagespec.common.verify.acceptance import Acceptance

VOCAB = 12


def random_tree(g: torch.Generator, n: int) -> DraftTree:
    parents = [-1] + [int(torch.randint(0, i, (), generator=g)) for i in range(1, n)]
    return DraftTree.from_parents(torch.randint(0, VOCAB, (n,), generator=g).tolist(), parents)


def peaked_logits(g, tree: DraftTree) -> torch.Tensor:
    """Logits whose argmax often follows the tree (so walks go deep)."""
    logits = torch.randn(tree.num_nodes, VOCAB, generator=g)
    for child in range(1, tree.num_nodes):
        if torch.rand((), generator=g) < 0.7:
            logits[int(tree.parents[child]), int(tree.tokens[child])] += 6.0
    return logits


@pytest.mark.parametrize("seed", range(5))
def test_batched_verify_equals_each_tree_alone(seed):
    g = torch.Generator().manual_seed(seed)
    trees = [random_tree(g, n) for n in (1, 4, 7, 3, 9)]
    params = [
        SamplingParams(),
        SamplingParams(temperature=0.9),
        SamplingParams(),
        SamplingParams(temperature=1.3, top_k=5),
        SamplingParams(),
    ]
    blocks = [peaked_logits(g, t) for t in trees]
    filler = torch.randn(2, VOCAB, generator=g)  # rows of other requests between the trees
    logits = torch.cat([filler, blocks[0], filler, *blocks[1:]])
    starts, row = [], 0
    for i, block in enumerate([filler, blocks[0], filler, *blocks[1:]]):
        if i not in (0, 2):
            starts.append(row)
        row += block.shape[0]
    speculator = Speculator(SagePolicy, None, Acceptance("auto"))  # SAGE reads the entropy
    got = speculator.verify(
        trees, logits, starts, [VerifyCheck(p, TorchRandom(seed * 10 + i)) for i, p in enumerate(params)]
    )
    for i, (tree, block, p, verdict) in enumerate(zip(trees, blocks, params, got)):
        expected = verify(tree, block, p, "auto", TorchRandom(seed * 10 + i))
        assert verdict.accepted == expected
        assert verdict.emitted == expected.emitted(tree)
        assert verdict.entropy == pytest.approx(float(entropy(block[expected.nodes[-1]])), abs=1e-5)


def test_entropy_only_for_a_policy_that_reads_it():
    g = torch.Generator().manual_seed(0)
    tree = random_tree(g, 5)
    logits = peaked_logits(g, tree)
    verdicts = {
        policy.name: Speculator(policy, None, Acceptance("auto")).verify(
            [tree], logits, [0], [VerifyCheck(SamplingParams())]
        )[0]
        for policy in (ChainPolicy, SagePolicy)
    }
    assert verdicts["chain"].accepted == verdicts["sage"].accepted
    assert verdicts["chain"].entropy != verdicts["chain"].entropy  # NaN: nobody reads it
    assert verdicts["sage"].entropy == pytest.approx(float(entropy(logits[verdicts["sage"].accepted.nodes[-1]])))


def test_requests_keep_their_state_until_they_end():
    speculator = Speculator(
        lambda: DynamicPolicy(depth=3, width=2, budget=5), lambda: NgramDrafter(2, 1), Acceptance("auto")
    )
    tokens = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    trees = speculator.draft(
        [DraftRequest("a", tokens), DraftRequest("b", tokens, room=2), DraftRequest("c", tokens, chain_only=True)]
    )
    shapes = {r: speculator.requests[r].last_shape for r in "abc"}
    assert shapes["a"].width == 2 and shapes["b"] == chain_of(shapes["a"], 2) and shapes["c"].width == 1
    assert trees[0].num_drafted <= 5 and trees[1].num_drafted <= 2 and trees[2].max_depth == trees[2].num_drafted
    assert trees[0].tokens[1:3].tolist() == [3, 1]  # the lookup's continuation
    assert speculator.requests["a"].steps == 1
    speculator.commit_features("a", torch.ones(3, 2))
    speculator.commit_features("a", torch.zeros(2, 2), start=2)  # a later step rewrote position 2 onward
    assert speculator.requests["a"].features.tolist() == [[1, 1], [1, 1], [0, 0], [0, 0]]
    # a prefix-cache hit: positions 4..5 were never run; they get zero rows, later rows stay aligned
    speculator.commit_features("a", torch.full((1, 2), 7.0), start=6)
    assert speculator.requests["a"].features.tolist() == [[1, 1], [1, 1], [0, 0], [0, 0], [0, 0], [0, 0], [7, 7]]
    speculator.retain(["a"])
    assert set(speculator.requests) == {"a"}


def test_a_chain_shape_within_room():
    assert chain_of(TreeShape(depth=5, width=3, budget=9), room=2) == TreeShape(depth=2, width=1, budget=2)
    assert chain_of(TreeShape(depth=4, width=2, budget=3)) == TreeShape(depth=3, width=1, budget=3)
