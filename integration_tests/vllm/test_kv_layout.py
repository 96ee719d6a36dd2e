"""The CPU KV-cache layout the plugin probes through vLLM's own cache-write op: K and V indices
split each (block, kv-head) region exactly, and K/V written by vLLM at any slot read back through
the layout, for each ISA layout vLLM picks here (fp32 and bf16, head sizes 64 and 48)."""

import pytest
import torch

from sagespec.plugins.vllm.kv_layout import probe_layout, regions


@pytest.mark.parametrize(
    "dtype, block_size, head_dim", [(torch.float32, 16, 64), (torch.bfloat16, 32, 64), (torch.float32, 16, 48)]
)
def test_layout_reads_back_what_vllm_wrote(dtype, block_size, head_dim):
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    isa = _get_attn_isa(dtype, block_size, head_dim)
    layout = probe_layout(isa, dtype, block_size, head_dim)
    both = torch.cat([layout.k_index.flatten(), layout.v_index.flatten()])
    assert torch.equal(both.sort().values, torch.arange(2 * block_size * head_dim)), isa

    num_blocks, heads, g = 3, 2, torch.Generator().manual_seed(0)
    kv = torch.zeros(num_blocks, heads, block_size, 2 * head_dim, dtype=dtype)
    key_cache, value_cache = kv.view(num_blocks, heads, 2 * block_size, head_dim).chunk(2, dim=2)
    slots = torch.randperm(num_blocks * block_size, generator=g)[:20]
    k = torch.randn(20, heads, head_dim, generator=g).to(dtype)
    v = torch.randn(20, heads, head_dim, generator=g).to(dtype)
    ops.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, slots, isa)
    ki, vi = layout.element_indices(slots, heads)
    flat = regions(kv).reshape(-1)
    assert torch.equal(flat[ki].view(20, heads, head_dim), k), isa
    assert torch.equal(flat[vi].view(20, heads, head_dim), v), isa
