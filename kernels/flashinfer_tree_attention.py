"""FlashInfer tree attention: ragged prefill with a custom mask (CUDA, fp16/bf16 only).

plan() (shapes, mask) is split from run() as FlashInfer intends; the wrapper and its workspace are
kept per device so repeated calls reuse them."""

from __future__ import annotations

from typing import Any

import torch

_WORKSPACE_BYTES = 128 * 1024 * 1024
_wrappers: dict[torch.device, Any] = {}  # flashinfer.BatchPrefillWithRaggedKVCacheWrapper per device


def _wrapper(device: torch.device) -> Any:
    import flashinfer

    if device not in _wrappers:
        ws = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        _wrappers[device] = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD")
    return _wrappers[device]


def tree_attention_flashinfer(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    custom_mask: torch.Tensor,
    mask_indptr: torch.Tensor | None = None,
    sm_scale: float | None = None,
) -> torch.Tensor:
    w = _wrapper(q.device)
    w.plan(
        qo_indptr.to(q.device, torch.int32),
        kv_indptr.to(q.device, torch.int32),
        q.shape[1],
        k.shape[1],
        q.shape[2],
        custom_mask=custom_mask.to(q.device),
        sm_scale=sm_scale,
        q_data_type=q.dtype,
        kv_data_type=k.dtype,
    )
    return w.run(q, k, v)
