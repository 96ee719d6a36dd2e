"""Our trees in SGLang's verify layout, checked against SGLang's own Triton tree kernels (run by
Triton's interpreter on CPU tensors): the positions and first-child/next-sibling links SGLang
derives from our mask are our tree's, and SGLang's greedy tree verification accepts exactly the
path our greedy verification accepts, padding included."""

import importlib

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sagespec.common.sampling import SamplingParams
from sagespec.common.tree import DraftTree
from sagespec.common.verify import verify
from sagespec.plugins.sglang.tree_layout import pack_trees

VOCAB = 12


@st.composite
def batches(draw):
    """(trees, verify width, target's greedy token per node): targets often copy a child's token,
    so paths of several accepted nodes are common."""
    n = draw(st.integers(2, 10))
    trees, targets = [], []
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(1, n))
        parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, k)]
        tree = DraftTree.from_parents(draw(st.lists(st.integers(0, VOCAB - 1), min_size=k, max_size=k)), parents)
        target = []
        for i in range(n):
            kids = tree.children(i) if i < k else ()
            if kids and draw(st.booleans()):
                target.append(int(tree.tokens[draw(st.sampled_from(kids))]))
            else:
                target.append(draw(st.integers(0, VOCAB - 1)))
        trees.append(tree)
        targets.append(target)
    return trees, n, torch.tensor(targets)


def sglang_greedy_tree_verify():
    """SGLang's Triton greedy tree verification (moved from eagle_utils to the kernel ops in 0.5.23)."""
    for module in ("sglang.kernels.ops.speculative.spec_tree", "sglang.srt.speculative.eagle_utils"):
        found = getattr(importlib.import_module(module), "verify_tree_greedy_triton", None)
        if found is not None:
            return found
    raise AssertionError("this SGLang has no verify_tree_greedy_triton")


def sglang_tree_links(layout, seq_lens):
    from sglang.kernels.ops.speculative.reconstruct_tree import reconstruct_indices_from_tree_mask_triton

    bs, n = layout.tokens.shape
    positions = torch.empty(bs * n, dtype=torch.long)
    index, first, sibling = (torch.empty(bs, n, dtype=torch.long) for _ in range(3))
    reconstruct_indices_from_tree_mask_triton(
        layout.mask.flatten().contiguous(), seq_lens, positions, index, first, sibling, bs, n
    )
    return positions.view(bs, n), index, first, sibling


@given(batches(), st.lists(st.integers(0, 40), min_size=3, max_size=3))
@settings(max_examples=40, deadline=None)
def test_sglang_derives_our_positions_and_links(batch, lens):
    trees, n, _ = batch
    layout = pack_trees(trees, n)
    seq_lens = torch.tensor(lens[: len(trees)])
    positions, index, first, sibling = sglang_tree_links(layout, seq_lens)
    for b, tree in enumerate(trees):
        k = tree.num_nodes
        ours_first, ours_sibling = tree.first_child_next_sibling()
        assert positions[b, :k].tolist() == (tree.depths + seq_lens[b]).tolist()
        assert first[b, :k].tolist() == ours_first.tolist() and sibling[b, :k].tolist() == ours_sibling.tolist()
        # padding: at the root's position, linked to nothing and from nothing
        assert positions[b, k:].tolist() == [int(seq_lens[b])] * (n - k)
        assert set(first[b, k:].tolist()) <= {-1} and set(sibling[b, k:].tolist()) <= {-1}
        assert not set(range(k, n)) & set(first[b].tolist() + sibling[b].tolist())
        assert index[b].tolist() == [b * n + i for i in range(n)]


@given(batches())
@settings(max_examples=60, deadline=None)
def test_sglang_greedy_tree_verification_accepts_our_path(batch):
    verify_tree_greedy_triton = sglang_greedy_tree_verify()
    trees, n, targets = batch
    layout = pack_trees(trees, n)
    bs = len(trees)
    _, index, first, sibling = sglang_tree_links(layout, torch.zeros(bs, dtype=torch.long))
    predicts = torch.full((bs * n,), -1, dtype=torch.long)
    accept_index = torch.full((bs, n), -1, dtype=torch.long)
    accept_num = torch.zeros(bs, dtype=torch.long)
    verify_tree_greedy_triton(predicts, accept_index, accept_num, layout.tokens, index, first, sibling, targets)
    for b, tree in enumerate(trees):
        k = tree.num_nodes
        logits = torch.nn.functional.one_hot(targets[b, :k], VOCAB).float()
        ours = verify(tree, logits, SamplingParams(), "greedy")
        assert int(accept_num[b]) == ours.num_drafted_accepted
        assert accept_index[b, : len(ours.nodes)].tolist() == [b * n + v for v in ours.nodes]
        assert [int(predicts[b * n + v]) for v in ours.nodes] == ours.emitted(tree)
