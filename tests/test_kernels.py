"""Tree attention: torch reference, Triton (interpreted on CPU) and per-path causal attention agree;
accepted KV is committed contiguously."""

import math
import os

import pytest
import torch

from sagespec.common.tree import DraftTree, RaggedTrees
from sagespec.kernels import (
    available_backends,
    commit_accepted_kv,
    commit_accepted_kv_ragged,
    tree_attention,
    tree_attention_reference,
)

HQ, HKV, D = 4, 2, 32


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    trees = [
        DraftTree.from_parents([1, 2, 3, 4, 5, 6], [-1, 0, 0, 1, 1, 2]),
        DraftTree.chain(7, [8, 9, 10]),
        DraftTree.root_only(3),
        DraftTree.from_parents(list(range(9)), [-1, 0, 1, 2, 0, 4, 0, 6, 7]),
    ]
    prefixes = [5, 0, 40, 17]
    ragged = RaggedTrees.from_trees(trees)
    q_lens = [t.num_nodes for t in trees]
    kv_lens = [p + t.num_nodes for p, t in zip(prefixes, trees)]
    qo = torch.tensor([0] + q_lens).cumsum(0)
    kv = torch.tensor([0] + kv_lens).cumsum(0)
    q = torch.randn(sum(q_lens), HQ, D, generator=g)
    k = torch.randn(sum(kv_lens), HKV, D, generator=g)
    v = torch.randn(sum(kv_lens), HKV, D, generator=g)
    mask, mask_indptr = ragged.attention_mask(prefixes)
    return trees, prefixes, q, k, v, qo, kv, mask, mask_indptr


def per_path_causal(trees, prefixes, q, k, v, qo, kv):
    """Each node attends, causally, to the prefix followed by its own root-to-node path."""
    out = torch.empty_like(q)
    for r, (t, p) in enumerate(zip(trees, prefixes)):
        for i in range(t.num_nodes):
            keys = list(range(p)) + [p + j for j in t.path_to(i)]
            kk = k[kv[r] + torch.tensor(keys, dtype=torch.long)].repeat_interleave(HQ // HKV, dim=1)
            vv = v[kv[r] + torch.tensor(keys, dtype=torch.long)].repeat_interleave(HQ // HKV, dim=1)
            qi = q[qo[r] + i]  # [HQ, D]
            att = torch.softmax(torch.einsum("hd,khd->hk", qi, kk) / math.sqrt(D), -1)
            out[qo[r] + i] = torch.einsum("hk,khd->hd", att, vv)
    return out


def test_reference_matches_per_path_attention():
    trees, prefixes, q, k, v, qo, kv, mask, mi = batch()
    ref = tree_attention_reference(q, k, v, qo, kv, mask, mi)
    torch.testing.assert_close(ref, per_path_causal(trees, prefixes, q, k, v, qo, kv), rtol=1e-5, atol=1e-5)


def test_triton_matches_reference_interpreted():
    assert os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
    assert "triton" in available_backends(torch.empty(1))
    trees, prefixes, q, k, v, qo, kv, mask, mi = batch(1)
    ref = tree_attention_reference(q, k, v, qo, kv, mask, mi)
    tri = tree_attention(q, k, v, qo, kv, mask, mi, backend="triton")
    torch.testing.assert_close(tri, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tri, per_path_causal(trees, prefixes, q, k, v, qo, kv), rtol=1e-5, atol=1e-5)


def test_auto_backend_on_cpu_is_the_reference():
    _trees, _prefixes, q, k, v, qo, kv, mask, mi = batch(2)
    assert torch.equal(tree_attention(q, k, v, qo, kv, mask), tree_attention_reference(q, k, v, qo, kv, mask, mi))
    with pytest.raises(ValueError, match="backend"):
        tree_attention(q, k, v, qo, kv, mask, backend="cuda-magic")


def test_commit_accepted_kv_single_and_ragged():
    cache = torch.arange(12.0).view(12, 1)
    assert commit_accepted_kv(cache, 4, [0, 2, 5]) == 7
    assert cache[:7, 0].tolist() == [0, 1, 2, 3, 4, 6, 9]
    flat = torch.arange(20.0).view(20, 1)
    lens = commit_accepted_kv_ragged(flat, torch.tensor([0, 8, 20]), [3, 5], [[0, 3], [0, 1, 4, 6]])
    assert lens == [5, 9]
    assert flat[:5, 0].tolist() == [0, 1, 2, 3, 6]
    assert flat[8:17, 0].tolist() == [8, 9, 10, 11, 12, 13, 14, 17, 19]


def causal_attention(q, k, v):
    """Row i of q attends to the keys up to its own position (the last len(q) keys are q's)."""
    start = k.shape[0] - q.shape[0]
    out = torch.empty_like(q)
    for i in range(q.shape[0]):
        kk = k[: start + i + 1].repeat_interleave(HQ // HKV, dim=1)
        vv = v[: start + i + 1].repeat_interleave(HQ // HKV, dim=1)
        att = torch.softmax(torch.einsum("hd,khd->hk", q[i], kk) / math.sqrt(D), -1)
        out[i] = torch.einsum("hk,khd->hd", att, vv)
    return out


def test_committed_cache_equals_a_fresh_causal_pass():
    """The tree-attention rows of the accepted path equal causal attention over the cache after the
    commit, which holds the prefix then the accepted nodes' K and V, as if only that path had run."""
    tree = DraftTree.from_parents([1, 2, 3, 4, 5], [-1, 0, 0, 2, 3])
    prefix, n, g = 6, tree.num_nodes, torch.Generator().manual_seed(3)
    q = torch.randn(n, HQ, D, generator=g)
    k = torch.randn(prefix + n, HKV, D, generator=g)
    v = torch.randn(prefix + n, HKV, D, generator=g)
    mask, mask_indptr = RaggedTrees.from_trees([tree]).attention_mask([prefix])
    tree_rows = tree_attention_reference(
        q, k, v, torch.tensor([0, n]), torch.tensor([0, prefix + n]), mask, mask_indptr
    )
    accepted = [0, 2, 3]
    assert tree.path_to(3) == accepted
    assert commit_accepted_kv(k, prefix, accepted) == prefix + 3
    assert commit_accepted_kv(v, prefix, accepted) == prefix + 3
    committed = causal_attention(q[accepted], k[: prefix + 3], v[: prefix + 3])
    torch.testing.assert_close(tree_rows[accepted], committed, rtol=1e-5, atol=1e-5)
    # a node off the path (node 1) saw different keys: its row must not match the committed pass
    assert not torch.allclose(tree_rows[1], causal_attention(q[[0, 1]], k[: prefix + 2], v[: prefix + 2])[1])
