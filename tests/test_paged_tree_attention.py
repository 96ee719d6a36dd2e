"""Paged tree attention (planned once per step, run per layer) equals the dense reference over the
same keys, for strided and arbitrary block layouts, grouped-query heads and ragged batches; slot
moves copy K and V exactly."""

import pytest
import torch

from sagespec.common.tree import DraftTree, within_window
from sagespec.kernels import tree_attention_reference
from sagespec.kernels.paged_tree_attention import BlockLayout, PagedTreeAttentionPlan, move_slots

HQ, HKV, D, BS = 6, 2, 32, 16


def vec_layout(bs=BS, d=D):
    """K transposed ([d, bs]) then V ([bs, d]) in each region: vLLM's CPU `vec` layout."""
    o, k = torch.arange(bs)[:, None], torch.arange(d)[None, :]
    return BlockLayout(bs, d, k * bs + o, bs * d + o * d + k)


def shuffled_layout(seed, bs=BS, d=D):
    """Any permutation of a region: exercises the non-strided path."""
    perm = torch.randperm(2 * bs * d, generator=torch.Generator().manual_seed(seed))
    return BlockLayout(bs, d, perm[: bs * d].view(bs, d), perm[bs * d :].view(bs, d))


def write(kv_flat, layout, slots, k, v):
    ki, vi = layout.element_indices(slots, HKV)
    kv_flat[ki] = k.reshape(-1)
    kv_flat[vi] = v.reshape(-1)


def make_case(layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    trees = [
        DraftTree.from_parents([1, 2, 3, 4, 5, 6], [-1, 0, 0, 1, 1, 2]),
        DraftTree.from_parents(list(range(9)), [-1, 0, 1, 2, 0, 4, 0, 6, 7]),
        DraftTree.chain(7, [8, 9, 10]),
    ]
    prefixes = [5, 37, 16]
    num_blocks = 24
    kv = torch.zeros(num_blocks, HKV, layout.region_size)
    free = torch.randperm(num_blocks, generator=g).tolist()
    tables, row_starts, dense_k, dense_v, row = [], [], [], [], 0
    for tree, prefix in zip(trees, prefixes):
        used = -(-(prefix + tree.num_nodes) // BS)
        table = torch.tensor([free.pop() for _ in range(used)], dtype=torch.int32)
        tables.append(table)
        slots = (table.long()[:, None] * BS + torch.arange(BS)).reshape(-1)[: prefix + tree.num_nodes]
        k = torch.randn(slots.numel(), HKV, D, generator=g)
        v = torch.randn(slots.numel(), HKV, D, generator=g)
        write(kv.view(-1), layout, slots, k, v)
        dense_k.append(k)
        dense_v.append(v)
        row_starts.append(row)
        row += tree.num_nodes + 2  # rows of other work between requests
    query = torch.randn(row, HQ, D, generator=g)
    return trees, prefixes, tables, row_starts, kv, query, dense_k, dense_v


def visible(tree, prefix, window):
    """The dense [n, prefix + n] mask: tree ancestors, within the sliding window if there is one."""
    mask = tree.attention_mask(prefix)
    if window:
        mask &= within_window(tree.positions(prefix), tree.key_positions(prefix), window)
    return mask


def poison_blocks_before_windows(kv, layout, tables, prefixes, window):
    """NaN in every block wholly before a request's root window: a plan that reads them fails."""
    for table, prefix in zip(tables, prefixes):
        for b in table[: max(0, prefix - window + 1) // BS].tolist():
            kv[b] = float("nan")


@pytest.mark.parametrize("layout", [vec_layout(), shuffled_layout(1)], ids=["strided", "shuffled"])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
@pytest.mark.parametrize("window", [None, 3, 20], ids=["full", "window3", "window20"])
def test_plan_run_equals_dense_reference(layout, softcap, window):
    assert (layout.strided is not None) == (layout.k_index[0, 1] == BS)
    trees, prefixes, tables, starts, kv, query, dense_k, dense_v = make_case(layout)
    if window:
        poison_blocks_before_windows(kv, layout, tables, prefixes, window)
    plan = PagedTreeAttentionPlan.build(layout, trees, prefixes, starts, tables, window=window)
    output = torch.full((query.shape[0], HQ * D), 123.0)
    plan.run(query, kv, output, scale=0.2, softcap=softcap)
    tree_rows = set()
    for tree, prefix, start, k, v in zip(trees, prefixes, starts, dense_k, dense_v):
        rows = slice(start, start + tree.num_nodes)
        tree_rows.update(range(rows.start, rows.stop))
        mask = visible(tree, prefix, window).reshape(-1)
        qo = torch.tensor([0, tree.num_nodes])
        kvp = torch.tensor([0, prefix + tree.num_nodes])
        if softcap:  # the reference has no soft cap: apply it by scaling q into tanh's range per score
            scores = (
                torch.einsum(
                    "qhd,khd->hqk",
                    query[rows].view(-1, HKV, HQ // HKV, D).flatten(1, 2),
                    k.repeat_interleave(HQ // HKV, 1),
                )
                * 0.2
            )
            scores = torch.tanh(scores / softcap) * softcap
            scores = scores.masked_fill(~visible(tree, prefix, window)[None], float("-inf"))
            want = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.repeat_interleave(HQ // HKV, 1))
        else:
            want = tree_attention_reference(query[rows], k, v, qo, kvp, mask, sm_scale=0.2)
        torch.testing.assert_close(output[rows].view(-1, HQ, D), want, rtol=1e-5, atol=1e-5)
    untouched = [r for r in range(query.shape[0]) if r not in tree_rows]
    assert (output[untouched] == 123.0).all()


def test_plan_masks_other_branches():
    """A node's row changes when a sibling's key changes only if that sibling is its ancestor."""
    layout = vec_layout()
    trees, prefixes, tables, starts, kv, query, _, _ = make_case(layout, seed=3)
    plan = PagedTreeAttentionPlan.build(layout, trees[:1], prefixes[:1], starts[:1], tables[:1])
    before = torch.zeros(query.shape[0], HQ * D)
    plan.run(query, kv, before)
    slot = int(tables[0][0]) * BS + prefixes[0] + 2  # node 2: child of the root, not of node 1
    _ki, vi = layout.element_indices(torch.tensor([slot]), HKV)
    kv.view(-1)[vi] += 10.0
    after = torch.zeros_like(before)
    plan.run(query, kv, after)
    changed = [(after[starts[0] + i] != before[starts[0] + i]).any().item() for i in range(trees[0].num_nodes)]
    # parents [-1, 0, 0, 1, 1, 2]: node 2 is seen by itself and its child 5 only
    assert changed == [False, False, True, False, False, True]


@pytest.mark.parametrize("layout", [vec_layout(), shuffled_layout(2)], ids=["strided", "shuffled"])
def test_move_slots_copies_k_and_v(layout):
    g = torch.Generator().manual_seed(0)
    kv = torch.randn(4, HKV, layout.region_size, generator=g)
    flat = kv.view(-1)
    src, dst = torch.tensor([9, 20, 33]), torch.tensor([7, 8, 9])  # dst 9 is also a source: read first
    k_src, v_src = (flat[i].clone() for i in layout.element_indices(src, HKV))
    ks, vs = layout.element_indices(src, HKV)
    kd, vd = layout.element_indices(dst, HKV)
    move_slots(flat, torch.cat([ks, vs]), torch.cat([kd, vd]))
    k_dst, v_dst = (flat[i] for i in layout.element_indices(dst, HKV))
    assert torch.equal(k_dst, k_src) and torch.equal(v_dst, v_src)


def test_gather_prefix_follows_the_block_table():
    bs, heads, dim = 4, 2, 3
    o, d = torch.arange(bs)[:, None], torch.arange(dim)[None, :]
    layout = BlockLayout(bs, dim, d * bs + o, bs * dim + o * dim + d)
    regions = torch.zeros(3, heads, layout.region_size)
    for slot in range(3 * bs):
        b, off = divmod(slot, bs)
        regions[b, :, layout.k_index[off]] = slot + torch.arange(dim, dtype=torch.float)
        regions[b, :, layout.v_index[off]] = -slot - torch.arange(dim, dtype=torch.float)
    k, v = layout.gather_prefix(regions, torch.tensor([2, 0, 1]), 6)  # blocks in the request's order
    assert k[:, 0, 0].tolist() == [8, 9, 10, 11, 0, 1] and v[:, 1, 1].tolist() == [-9, -10, -11, -12, -1, -2]


@pytest.mark.parametrize("window", [None, 5], ids=["full", "window5"])
def test_token_pool_run_equals_dense_reference(window):
    """SGLang-style pool: separate K and V buffers, one slot per token, scattered slots per request."""
    g = torch.Generator().manual_seed(5)
    trees = [DraftTree.from_parents([1, 2, 3, 4, 5, 6], [-1, 0, 0, 1, 1, 2]), DraftTree.chain(7, [8, 9])]
    prefixes, starts = [11, 4], [0, 9]
    k_buffer, v_buffer = torch.randn(64, HKV, D, generator=g), torch.randn(64, HKV, D, generator=g)
    free = torch.randperm(64, generator=g)
    tables = [free[:20], free[20:40]]  # each request's slot of each position
    query = torch.randn(14, HQ, D, generator=g)
    plan = PagedTreeAttentionPlan.build(BlockLayout.token_pool(D), trees, prefixes, starts, tables, window=window)
    output = torch.full((14, HQ * D), 123.0)
    plan.run_token_pool(query, k_buffer, v_buffer, output, scale=0.3)
    for tree, prefix, start, table in zip(trees, prefixes, starts, tables):
        rows, slots = slice(start, start + tree.num_nodes), table[: prefix + tree.num_nodes]
        want = tree_attention_reference(
            query[rows],
            k_buffer[slots],
            v_buffer[slots],
            torch.tensor([0, tree.num_nodes]),
            torch.tensor([0, slots.numel()]),
            visible(tree, prefix, window).reshape(-1),
            sm_scale=0.3,
        )
        torch.testing.assert_close(output[rows].view(-1, HQ, D), want, rtol=1e-5, atol=1e-5)
    assert (output[6:9] == 123.0).all()
