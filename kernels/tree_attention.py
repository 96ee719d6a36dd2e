"""Tree attention over a batch of requests, each a cached prefix plus its tree tokens.

Layout (ragged, as FlashInfer and the engines use): q [total_q, Hq, D]; k, v [total_kv, Hkv, D];
request r owns q rows qo_indptr[r]:qo_indptr[r+1] and kv rows kv_indptr[r]:kv_indptr[r+1]; its mask
block is row-major [q_len_r x kv_len_r] at custom_mask[mask_indptr[r]:]. Hq is a multiple of Hkv
(grouped-query attention). Every query row must see at least one key (a tree node sees itself).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F


def _mask_indptr(qo_indptr: torch.Tensor, kv_indptr: torch.Tensor) -> torch.Tensor:
    q_lens = qo_indptr[1:] - qo_indptr[:-1]
    kv_lens = kv_indptr[1:] - kv_indptr[:-1]
    out = torch.zeros_like(qo_indptr)
    out[1:] = torch.cumsum(q_lens * kv_lens, 0)
    return out


def tree_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    custom_mask: torch.Tensor,
    mask_indptr: torch.Tensor | None = None,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """The oracle: per request, SDPA with the boolean mask."""
    mask_indptr = _mask_indptr(qo_indptr, kv_indptr) if mask_indptr is None else mask_indptr
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    gqa = q.shape[1] != k.shape[1]
    out = torch.empty_like(q)
    qo, kv, mi = qo_indptr.tolist(), kv_indptr.tolist(), mask_indptr.tolist()
    for r in range(len(qo) - 1):
        q_len, kv_len = qo[r + 1] - qo[r], kv[r + 1] - kv[r]
        if q_len == 0:
            continue
        mask = custom_mask[mi[r] : mi[r] + q_len * kv_len].view(q_len, kv_len).to(q.device)
        o = F.scaled_dot_product_attention(
            q[qo[r] : qo[r + 1]].transpose(0, 1),
            k[kv[r] : kv[r + 1]].transpose(0, 1),
            v[kv[r] : kv[r + 1]].transpose(0, 1),
            attn_mask=mask,
            scale=scale,
            enable_gqa=gqa,
        )
        out[qo[r] : qo[r + 1]] = o.transpose(0, 1)
    return out


def _triton_usable(q: torch.Tensor) -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


def _flashinfer_usable(q: torch.Tensor) -> bool:
    if not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16):
        return False
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


def available_backends(q: torch.Tensor) -> list[str]:
    out = ["torch"]
    if _triton_usable(q):
        out.append("triton")
    if _flashinfer_usable(q):
        out.append("flashinfer")
    return out


def tree_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    custom_mask: torch.Tensor,
    mask_indptr: torch.Tensor | None = None,
    sm_scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Dispatch: `auto` takes FlashInfer on CUDA where installed, then the torch reference.
    Triton is used when asked for by name (on CUDA, or on CPU under TRITON_INTERPRET=1)."""
    if backend == "auto":
        backend = "flashinfer" if _flashinfer_usable(q) else "torch"
    if backend == "torch":
        return tree_attention_reference(q, k, v, qo_indptr, kv_indptr, custom_mask, mask_indptr, sm_scale)
    if backend == "triton":
        from .triton_tree_attention import tree_attention_triton

        return tree_attention_triton(q, k, v, qo_indptr, kv_indptr, custom_mask, mask_indptr, sm_scale)
    if backend == "flashinfer":
        from .flashinfer_tree_attention import tree_attention_flashinfer

        return tree_attention_flashinfer(q, k, v, qo_indptr, kv_indptr, custom_mask, mask_indptr, sm_scale)
    raise ValueError(f"tree attention backend {backend!r} is unknown; allowed: auto, torch, triton, flashinfer")
