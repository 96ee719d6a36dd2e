"""Where vLLM's CPU attention keeps each token's K and V inside a cache block.

The CPU kernels store K and V in an ISA-specific order inside each (block, kv-head) region of
2 * block_size * head_dim elements (K in the first half). Rather than hard-code one order, the
layout is probed once through vLLM's own cache-write op: write a recognisable vector at one slot,
see where its values land. The result maps (offset in block, dim) -> index in the region.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockLayout:
    block_size: int
    k_index: torch.Tensor  # [block_size, head_dim] long: index of K(offset, d) in a region
    v_index: torch.Tensor  # [block_size, head_dim] long: index of V(offset, d) in a region

    def regions(self, kv_cache: torch.Tensor) -> torch.Tensor:
        """[num_blocks, kv_heads, 2 * block_size * head_dim] view of a layer's cache."""
        nb, h = kv_cache.shape[:2]
        return kv_cache.view(nb, h, -1)

    def gather(self, kv_cache: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V [len(slots), kv_heads, head_dim] stored at the given linear slots."""
        raw = self.regions(kv_cache)
        blocks, offsets = slots // self.block_size, slots % self.block_size
        per_slot = raw[blocks]                                       # [n, H, region]
        k = torch.gather(per_slot, 2, self.k_index[offsets][:, None, :].expand(-1, raw.shape[1], -1))
        v = torch.gather(per_slot, 2, self.v_index[offsets][:, None, :].expand(-1, raw.shape[1], -1))
        return k, v

    def gather_prefix(self, kv_cache: torch.Tensor, block_ids: torch.Tensor, length: int):
        """K, V [length, kv_heads, head_dim] of a request's first `length` tokens, whose blocks are
        `block_ids` (its block-table row)."""
        num_blocks = -(-length // self.block_size)
        regions = self.regions(kv_cache)[block_ids[:num_blocks].long()]          # [nb, H, region]
        heads = regions.shape[1]
        k = regions[:, :, self.k_index].permute(0, 2, 1, 3).reshape(-1, heads, self.k_index.shape[1])
        v = regions[:, :, self.v_index].permute(0, 2, 1, 3).reshape(-1, heads, self.v_index.shape[1])
        return k[:length], v[:length]

    def move(self, kv_cache: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy K and V from slots `src` to slots `dst` (all sources are read before any write)."""
        if src.numel() == 0:
            return
        raw = self.regions(kv_cache)
        k, v = self.gather(kv_cache, src)
        blocks, offsets = dst // self.block_size, dst % self.block_size
        for i in range(dst.numel()):
            raw[blocks[i], :, self.k_index[offsets[i]]] = k[i]
            raw[blocks[i], :, self.v_index[offsets[i]]] = v[i]


@functools.lru_cache(maxsize=None)
def probe_layout(isa: str, dtype: torch.dtype, block_size: int, head_dim: int) -> BlockLayout:
    from vllm import _custom_ops as ops
    k_index = torch.empty(block_size, head_dim, dtype=torch.long)
    v_index = torch.empty(block_size, head_dim, dtype=torch.long)
    marks = torch.arange(1, head_dim + 1, dtype=dtype).view(1, 1, head_dim)  # exact in bf16 up to 256
    for offset in range(block_size):
        kv = torch.zeros(1, 1, block_size, 2 * head_dim, dtype=dtype)
        key_cache, value_cache = kv.view(1, 1, 2 * block_size, head_dim).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(marks, -marks, key_cache, value_cache,
                                       torch.tensor([offset], dtype=torch.long), isa)
        region = kv.view(-1).float()
        for sign, index in ((1.0, k_index), (-1.0, v_index)):
            where = torch.nonzero(region * sign > 0).flatten()
            if where.numel() != head_dim:
                raise RuntimeError(f"sagespec: cannot read vLLM's CPU KV layout (isa {isa}, {dtype})")
            index[offset, (region[where] * sign).long() - 1] = where
    return BlockLayout(block_size, k_index, v_index)
