"""Triton tree attention: one program per (query row, query head), online softmax over the
request's keys in blocks, the custom mask read per key. Runs on GPU, and on CPU under
TRITON_INTERPRET=1 (how the tests check it here)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


# Inside a kernel every non-constexpr argument (pointer or scalar) is a tl.tensor; Triton would read
# an `int` or `float` annotation as a fixed i32 or fp32 argument type.
@triton.jit
def _tree_attention_kernel(
    Q: tl.tensor,
    K: tl.tensor,
    V: tl.tensor,
    O: tl.tensor,
    MASK: tl.tensor,
    ROW_REQ: tl.tensor,
    QO_INDPTR: tl.tensor,
    KV_INDPTR: tl.tensor,
    MASK_INDPTR: tl.tensor,
    sm_scale: tl.tensor,
    stride_qt: tl.tensor,
    stride_qh: tl.tensor,
    stride_kt: tl.tensor,
    stride_kh: tl.tensor,
    stride_vt: tl.tensor,
    stride_vh: tl.tensor,
    stride_ot: tl.tensor,
    stride_oh: tl.tensor,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    row = tl.program_id(0)
    head = tl.program_id(1)
    req = tl.load(ROW_REQ + row)
    q_start = tl.load(QO_INDPTR + req)
    kv_start = tl.load(KV_INDPTR + req)
    kv_len = tl.load(KV_INDPTR + req + 1) - kv_start
    mask_row = tl.load(MASK_INDPTR + req) + (row - q_start) * kv_len
    kv_head = head // GROUP

    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = tl.load(Q + row * stride_qt + head * stride_qh + d, mask=d_ok, other=0.0).to(tl.float32)
    m_i = -1.0e30
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, kv_len, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < kv_len
        seen = tl.load(MASK + mask_row + n, mask=n_ok, other=0) != 0
        k = tl.load(
            K + (kv_start + n)[:, None] * stride_kt + kv_head * stride_kh + d[None, :],
            mask=n_ok[:, None] & d_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * sm_scale
        s = tl.where(seen, s, -1.0e30)
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.where(seen, tl.exp(s - m_new), 0.0)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(
            V + (kv_start + n)[:, None] * stride_vt + kv_head * stride_vh + d[None, :],
            mask=n_ok[:, None] & d_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    out = acc / l_i
    tl.store(O + row * stride_ot + head * stride_oh + d, out.to(O.dtype.element_ty), mask=d_ok)


def tree_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    custom_mask: torch.Tensor,
    mask_indptr: torch.Tensor | None = None,
    sm_scale: float | None = None,
    block_n: int = 32,
) -> torch.Tensor:
    from .tree_attention import _mask_indptr

    mask_indptr = _mask_indptr(qo_indptr, kv_indptr) if mask_indptr is None else mask_indptr
    total_q, hq, dim = q.shape
    if hq % k.shape[1]:
        raise ValueError(f"query heads {hq} must be a multiple of kv heads {k.shape[1]}")
    q_lens = (qo_indptr[1:] - qo_indptr[:-1]).to(q.device)
    row_req = torch.repeat_interleave(torch.arange(q_lens.numel(), device=q.device), q_lens)
    out = torch.empty_like(q)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(dim)
    dev = q.device
    _tree_attention_kernel[(total_q, hq)](
        q,
        k,
        v,
        out,
        custom_mask.to(dev, torch.int8),
        row_req.to(torch.int64),
        qo_indptr.to(dev, torch.int64),
        kv_indptr.to(dev, torch.int64),
        mask_indptr.to(dev, torch.int64),
        scale,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP=hq // k.shape[1],
        HEAD_DIM=dim,
        BLOCK_D=triton.next_power_of_2(dim),
        BLOCK_N=block_n,
    )
    return out
