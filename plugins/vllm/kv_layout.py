"""Where vLLM's CPU attention keeps each token's K and V inside a cache block.

The CPU kernels store K and V in an ISA-specific order inside each (block, kv-head) region of
2 * block_size * head_dim elements (K in the first half). Rather than hard-code one order, the
layout is probed once through vLLM's own cache-write op: write a recognisable vector at one slot,
see where its values land. The result (`kernels.paged_tree_attention.BlockLayout`) maps
(offset in block, dim) -> index in the region.
"""

from __future__ import annotations

import functools

import torch

from sagespec.kernels.paged_tree_attention import BlockLayout


def regions(kv_cache: torch.Tensor) -> torch.Tensor:
    """[num_blocks, kv_heads, 2 * block_size * head_dim] view of a layer's CPU cache."""
    nb, h = kv_cache.shape[:2]
    return kv_cache.view(nb, h, -1)


def layer_layout(layer, kv_cache: torch.Tensor) -> BlockLayout:
    """The layout of one attention layer's cache ([num_blocks, kv_heads, block_size, 2 * head_dim])."""
    return probe_layout(layer.isa, kv_cache.dtype, kv_cache.shape[2], kv_cache.shape[-1] // 2)


@functools.cache
def probe_layout(isa: str, dtype: torch.dtype, block_size: int, head_dim: int) -> BlockLayout:
    from vllm import _custom_ops as ops

    k_index = torch.empty(block_size, head_dim, dtype=torch.long)
    v_index = torch.empty(block_size, head_dim, dtype=torch.long)
    marks = torch.arange(1, head_dim + 1, dtype=dtype).view(1, 1, head_dim)  # exact in bf16 up to 256
    for offset in range(block_size):
        kv = torch.zeros(1, 1, block_size, 2 * head_dim, dtype=dtype)
        key_cache, value_cache = kv.view(1, 1, 2 * block_size, head_dim).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(
            marks, -marks, key_cache, value_cache, torch.tensor([offset], dtype=torch.long), isa
        )
        region = kv.view(-1).float()
        for sign, index in ((1.0, k_index), (-1.0, v_index)):
            where = torch.nonzero(region * sign > 0).flatten()
            if where.numel() != head_dim:
                raise RuntimeError(f"sagespec: cannot read vLLM's CPU KV layout (isa {isa}, {dtype})")
            index[offset, (region[where] * sign).long() - 1] = where
    return BlockLayout(block_size, head_dim, k_index, v_index)
