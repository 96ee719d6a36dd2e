"""DraftTree invariants and derived views, property-based."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sagespec.common.tree import DraftTree, RaggedTrees, TreeError


@st.composite
def trees(draw, max_nodes=24):
    n = draw(st.integers(1, max_nodes))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    return DraftTree.from_parents(tokens, parents)


@given(trees(), st.integers(0, 100))
@settings(max_examples=150, deadline=None)
def test_derived_views_agree(tree, prefix):
    n = tree.num_nodes
    mask = tree.ancestor_mask()
    for i in range(n):
        path = tree.path_to(i)
        assert path[0] == 0 and path[-1] == i
        assert mask[i].nonzero().flatten().tolist() == sorted(path)
        assert len(path) - 1 == int(tree.depths[i])
    assert torch.equal(tree.positions(prefix), tree.depths + prefix)
    full = tree.attention_mask(prefix)
    assert full.shape == (n, prefix + n) and bool(full[:, :prefix].all()) and torch.equal(full[:, prefix:], mask)
    # every node lies on some root-to-leaf path; each path ends at a leaf
    covered = {i for p in tree.root_to_leaf_paths() for i in p}
    assert covered == set(range(n))
    # first-child / next-sibling rebuild the children lists
    first, nxt = tree.first_child_next_sibling()
    for i in range(n):
        kids, c = [], int(first[i])
        while c != -1:
            kids.append(c)
            c = int(nxt[c])
        assert tuple(kids) == tree.children(i)
    # rank paths are prefix-closed and unique
    ranks = tree.rank_paths()
    assert len(set(ranks)) == len(ranks)
    assert all(len(r) == 1 or r[:-1] in set(ranks) for r in ranks)


@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=5), max_size=6), st.integers(1, 12))
@settings(max_examples=100, deadline=None)
def test_trie_from_token_paths(paths, budget):
    tree = DraftTree.from_token_paths(7, paths, max_nodes=budget)
    assert tree.num_drafted <= budget
    toks = tree.tokens.tolist()
    # siblings are distinct tokens, and every kept node spells a prefix of some input path
    for i in range(tree.num_nodes):
        kid_tokens = [toks[c] for c in tree.children(i)]
        assert len(kid_tokens) == len(set(kid_tokens))
        spelled = [toks[j] for j in tree.path_to(i)[1:]]
        assert any(list(p[: len(spelled)]) == spelled for p in paths) or not spelled
    if not paths or budget >= sum(len(p) for p in paths):
        # without a cut, every input path is spelled out in full
        for p in paths:
            node = 0
            for t in p:
                matches = [c for c in tree.children(node) if toks[c] == t]
                assert len(matches) == 1, f"path {p} is not spelled out: token {t} missing under node {node}"
                node = matches[0]


@given(st.lists(trees(8), min_size=1, max_size=5), st.data())
@settings(max_examples=50, deadline=None)
def test_ragged_layout(tree_list, data):
    prefixes = [data.draw(st.integers(0, 9)) for _ in tree_list]
    batch = RaggedTrees.from_trees(tree_list)
    assert batch.indptr.tolist()[-1] == sum(t.num_nodes for t in tree_list)
    flat, mask_indptr = batch.attention_mask(prefixes)
    for r, (t, p) in enumerate(zip(tree_list, prefixes)):
        a, b = batch.indptr[r], batch.indptr[r + 1]
        assert torch.equal(batch.tokens[a:b], t.tokens)
        block = flat[mask_indptr[r] : mask_indptr[r + 1]].view(t.num_nodes, p + t.num_nodes)
        assert torch.equal(block, t.attention_mask(p))
    assert torch.equal(batch.positions(prefixes), torch.cat([t.positions(p) for t, p in zip(tree_list, prefixes)]))


@pytest.mark.parametrize(
    "tokens,parents,depths,match",
    [
        ([1, 2], [0, 0], [0, 1], "root"),
        ([1, 2, 3], [-1, 2, 0], [0, 1, 1], "precede"),
        ([1, 2], [-1, 0], [0, 2], "depth"),
        ([1, -2], [-1, 0], [0, 1], "non-negative"),
        ([1, 2], [-1], [0], "equal lengths"),
    ],
)
def test_invalid_trees_rejected(tokens, parents, depths, match):
    with pytest.raises(TreeError, match=match):
        DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))


def test_draft_probs_validated():
    with pytest.raises(TreeError, match="draft_probs"):
        DraftTree.chain(1, [2, 3], draft_probs=torch.ones(2, 5))
    with pytest.raises(TreeError, match="sampled_children"):
        DraftTree.chain(1, [2], sampled_children=True)
