"""Tree attention read straight from a paged KV cache, planned once per step and run per layer.

The split follows FlashInfer's plan/run: `PagedTreeAttentionPlan.build` turns a batch of trees
(their prefix lengths and block tables) into index and mask tensors once per step; `run` is the
per-layer call. It reads whole cache blocks (one `index_select` over block ids, a contiguous copy),
views K and V inside them through the cache's block layout, and computes only the tree rows, all
requests at once (padded to the longest). Nothing is gathered per token and nothing is planned per
layer, so a step costs a handful of torch ops per layer.

Cache layouts: `run` reads a paged cache whose `regions` are [num_blocks, kv_heads, region], one
(block, kv head) region holding K and V of `block_size` tokens (`BlockLayout` says where K(offset, d)
and V(offset, d) sit in it; vLLM's CPU cache). `run_token_pool` reads a token-granular pool, K and
V buffers [slots, kv_heads, head_dim] with one slot per token (SGLang's pool; plan it with
`BlockLayout.token_pool`, whose "block table" is the request's slot of each position). The tree's
own tokens must already be written at their linear positions prefix_len .. prefix_len + n - 1.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sagespec.common.tree import DraftTree, within_window


@dataclass(frozen=True)
class StridedView:
    """X(offset, d) = region[start + offset * offset_stride + d * dim_stride]."""

    start: int
    offset_stride: int
    dim_stride: int


@dataclass(frozen=True)
class BlockLayout:
    """Where each token's K and V sit inside one (block, kv head) region of a paged cache."""

    block_size: int
    head_dim: int
    k_index: torch.Tensor  # [block_size, head_dim] long: index of K(offset, d) in a region
    v_index: torch.Tensor  # [block_size, head_dim] long: index of V(offset, d) in a region

    @classmethod
    def token_pool(cls, head_dim: int) -> BlockLayout:
        """One token per block: a pool of separate K and V buffers, each [slots, kv_heads, head_dim]."""
        d = torch.arange(head_dim)[None, :]
        return cls(1, head_dim, d, d + head_dim)

    @property
    def region_size(self) -> int:
        return 2 * self.block_size * self.head_dim

    @functools.cached_property
    def strided(self) -> tuple[StridedView, StridedView] | None:
        """K and V as strided views of a region when the layout is affine in (offset, d), else None."""
        views = []
        for index in (self.k_index, self.v_index):
            start = int(index[0, 0])
            so = int(index[1, 0]) - start if self.block_size > 1 else 0
            sd = int(index[0, 1]) - start if self.head_dim > 1 else 0
            expect = start + torch.arange(self.block_size)[:, None] * so + torch.arange(self.head_dim) * sd
            if not torch.equal(expect, index):
                return None
            views.append(StridedView(start, so, sd))
        return views[0], views[1]

    def element_indices(self, slots: torch.Tensor, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat indices into a layer's cache of K and V at `slots`: each [len(slots) * heads * head_dim]."""
        region = self.region_size
        blocks, offsets = slots // self.block_size, slots % self.block_size
        base = (blocks[:, None, None] * num_kv_heads + torch.arange(num_kv_heads)[None, :, None]) * region
        return (
            (base + self.k_index[offsets][:, None, :]).reshape(-1),
            (base + self.v_index[offsets][:, None, :]).reshape(-1),
        )

    def gather_prefix(
        self, regions: torch.Tensor, block_ids: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V [length, kv_heads, head_dim] of a request's first `length` tokens, whose blocks are
        `block_ids` (its block-table row), from `regions` [num_blocks, kv_heads, region]."""
        picked = regions[block_ids[: -(-length // self.block_size)].long()]  # [nb, H, region]
        heads = picked.shape[1]
        k = picked[:, :, self.k_index].transpose(1, 2).reshape(-1, heads, self.head_dim)
        v = picked[:, :, self.v_index].transpose(1, 2).reshape(-1, heads, self.head_dim)
        return k[:length], v[:length]


def move_slots(kv_flat: torch.Tensor, src_index: torch.Tensor, dst_index: torch.Tensor) -> None:
    """Copy the elements at `src_index` onto `dst_index` of a flat cache (sources read before writes)."""
    kv_flat.index_copy_(0, dst_index, kv_flat.index_select(0, src_index))


@dataclass
class PagedTreeAttentionPlan:
    """Index and mask tensors for one step's tree rows; `run` once per attention layer."""

    layout: BlockLayout
    query_rows: torch.Tensor  # [B, n_max] long: each tree row's row in the step's flat batch (padding: 0)
    out_rows: torch.Tensor  # [valid] long: rows written back
    out_select: torch.Tensor  # [valid] long: their places in the flattened [B * n_max] result
    block_ids: torch.Tensor  # [B * blocks_max] long: the blocks each request reads (padding: its first)
    mask: torch.Tensor  # [B, 1, 1, n_max, blocks_max * block_size] fp32 additive (0 or -inf)
    num_blocks: int  # blocks_max

    @classmethod
    def build(
        cls,
        layout: BlockLayout,
        trees: Sequence[DraftTree],
        prefix_lens: Sequence[int],
        row_starts: Sequence[int],
        block_tables: Sequence[torch.Tensor],
        window: int | None = None,
    ) -> PagedTreeAttentionPlan:
        """Tree r's node i is the step's row row_starts[r] + i and sits at linear slot
        prefix_lens[r] + i of the request whose block-table row is block_tables[r]. With a sliding
        `window` W, node i (position prefix + depth_i) sees only keys at positions > prefix + depth_i - W:
        the prefix's last W - 1 - depth_i tokens and its ancestors less than W deep above it; blocks
        wholly before the root's window are not read (an engine may have freed them)."""
        if not trees:
            raise ValueError("PagedTreeAttentionPlan needs at least one tree")
        if window is not None and window < 1:
            raise ValueError(f"sliding window must be >= 1, got {window}")
        bs = layout.block_size
        n_max = max(t.num_nodes for t in trees)
        seq = [p + t.num_nodes for p, t in zip(prefix_lens, trees)]
        first = [max(0, p - window + 1) // bs if window else 0 for p in prefix_lens]  # first block read
        blocks_max = max(-(-s // bs) - f for s, f in zip(seq, first))
        width = blocks_max * bs
        batch = len(trees)
        query_rows = torch.zeros(batch, n_max, dtype=torch.long)
        block_ids = torch.empty(batch, blocks_max, dtype=torch.long)
        mask = torch.full((batch, n_max, width), float("-inf"))
        out_rows: list[int] = []
        out_select: list[int] = []
        for r, (tree, prefix, start, table) in enumerate(zip(trees, prefix_lens, row_starts, block_tables)):
            n, used = tree.num_nodes, -(-seq[r] // bs)
            query_rows[r, :n] = torch.arange(start, start + n)
            ids = table[first[r] : used].long()
            block_ids[r, : ids.numel()] = ids
            block_ids[r, ids.numel() :] = ids[0]
            visible = torch.zeros(n, width, dtype=torch.bool)
            base = first[r] * bs  # the slot of mask column 0
            visible[:, : prefix - base] = True
            visible[:, prefix - base : prefix - base + n] = tree.ancestor_mask()
            if window:
                keys = tree.key_positions(prefix)[base:]
                visible[:, : keys.numel()] &= within_window(tree.positions(prefix), keys, window)
            mask[r, :n].masked_fill_(visible, 0.0)
            out_rows += range(start, start + n)
            out_select += range(r * n_max, r * n_max + n)
        return cls(
            layout,
            query_rows,
            torch.tensor(out_rows),
            torch.tensor(out_select),
            block_ids.reshape(-1),
            mask[:, None, None],
            blocks_max,
        )

    def _blocks(self, regions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K transposed [B, nb, Hkv, D, bs] and V [B, nb, Hkv, bs, D] (fp32) of each request's blocks,
        block by block as the cache stores them: one contiguous copy, then views."""
        bs, d = self.layout.block_size, self.layout.head_dim
        heads, region = regions.shape[1], regions.shape[2]
        batch = self.query_rows.shape[0]
        picked = regions.index_select(0, self.block_ids).float()  # [B*nb, H, region]
        if self.layout.strided is None:  # any layout: gather by index
            k = picked[:, :, self.layout.k_index].view(batch, self.num_blocks, heads, bs, d)
            v = picked[:, :, self.layout.v_index].view(batch, self.num_blocks, heads, bs, d)
            return k.transpose(-1, -2), v
        k_view, v_view = self.layout.strided
        lead = (self.num_blocks * heads * region, heads * region, region)
        k_t = picked.as_strided(
            (batch, self.num_blocks, heads, d, bs), (*lead, k_view.dim_stride, k_view.offset_stride), k_view.start
        )
        v = picked.as_strided(
            (batch, self.num_blocks, heads, bs, d), (*lead, v_view.offset_stride, v_view.dim_stride), v_view.start
        )
        return k_t, v

    def _queries(self, query: torch.Tensor, heads: int) -> torch.Tensor:
        """The tree rows of query [T, Hq, D] as [B, Hkv, group * n_max, D] in fp32."""
        batch, n_max = self.query_rows.shape
        hq, d = query.shape[1], query.shape[2]
        q = query.index_select(0, self.query_rows.reshape(-1)).view(batch, n_max, heads, hq // heads, d)
        return q.permute(0, 2, 3, 1, 4).reshape(batch, heads, hq // heads * n_max, d).float()

    def _probabilities(self, scores: torch.Tensor, heads: int, scale: float | None, softcap: float) -> torch.Tensor:
        """scores [B, Hkv, group * n_max, keys] -> masked softmax, same shape."""
        batch, n_max = self.query_rows.shape
        d = self.layout.head_dim
        scores = scores.mul_(scale if scale is not None else 1.0 / math.sqrt(d))
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        keys = scores.shape[-1]
        scores = scores.view(batch, heads, -1, n_max, keys).add_(self.mask.view(batch, 1, 1, n_max, keys))
        return torch.softmax(scores, dim=-1).view(batch, heads, -1, keys)

    def _write(self, out: torch.Tensor, output: torch.Tensor, heads: int) -> None:
        """out [B, Hkv, group * n_max, D] into the tree rows of output [T, Hq * D] or [T, Hq, D]."""
        batch, n_max = self.query_rows.shape
        d = out.shape[-1]
        out = out.view(batch, heads, -1, n_max, d).permute(0, 3, 1, 2, 4).reshape(batch * n_max, -1)
        flat = output.view(output.shape[0], -1)
        flat.index_copy_(0, self.out_rows, out.index_select(0, self.out_select).to(flat.dtype))

    def run(
        self,
        query: torch.Tensor,
        regions: torch.Tensor,
        output: torch.Tensor,
        scale: float | None = None,
        softcap: float = 0.0,
    ) -> None:
        """query [T, Hq, D] (the step's rows); regions [num_blocks, Hkv, region]; writes the tree
        rows of `output` ([T, Hq * D] or [T, Hq, D]). Softmax in fp32."""
        batch = self.query_rows.shape[0]
        k_t, v = self._blocks(regions)
        nb, heads, bs = self.num_blocks, k_t.shape[2], self.layout.block_size
        q = self._queries(query, heads)[:, None]  # [B, 1, H, g*n, D]
        scores = torch.matmul(q, k_t)  # [B, nb, H, g*n, bs]
        scores = scores.permute(0, 2, 3, 1, 4).reshape(batch, heads, -1, nb * bs)
        probs = self._probabilities(scores, heads, scale, softcap)
        probs = probs.view(batch, heads, -1, nb, bs).permute(0, 3, 1, 2, 4)
        self._write(torch.matmul(probs, v).sum(1), output, heads)  # [B, H, g*n, D]

    def run_token_pool(
        self,
        query: torch.Tensor,
        k_buffer: torch.Tensor,
        v_buffer: torch.Tensor,
        output: torch.Tensor,
        scale: float | None = None,
        softcap: float = 0.0,
    ) -> None:
        """As `run`, for a plan built with `BlockLayout.token_pool` over K and V buffers [slots, Hkv, D]."""
        if self.layout.block_size != 1:
            raise ValueError("run_token_pool needs a plan built with BlockLayout.token_pool (one token per block)")
        batch, keys = self.query_rows.shape[0], self.num_blocks
        heads = k_buffer.shape[1]
        k = k_buffer.index_select(0, self.block_ids).view(batch, keys, heads, -1).float()
        v = v_buffer.index_select(0, self.block_ids).view(batch, keys, heads, -1).float()
        scores = torch.matmul(self._queries(query, heads), k.permute(0, 2, 3, 1))  # [B, H, g*n, keys]
        probs = self._probabilities(scores, heads, scale, softcap)
        self._write(torch.matmul(probs, v.transpose(1, 2)), output, heads)
