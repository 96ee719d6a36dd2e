"""Torch paths for SGLang's CPU engine where, under sage, it would call an sgl_kernel op or an
attention path without tree masks. Installed only when SGLang runs its CPU engine
(`SGLANG_USE_CPU_ENGINE=1`), and each takes over only while the engine's algorithm is sage:
- the KV pool's copy-kernel warm-up (SGLang runs it whenever speculation is on) is skipped: sage
  moves accepted KV itself, in torch;
- `assign_req_to_token_pool_func` (slots for each step's verify window) is a torch range write;
- `TorchNativeAttnBackend.forward_extend` in TARGET_VERIFY mode attends with each tree's mask:
  every node sees the request's cached prefix and its own ancestors, within the layer's sliding
  window if it has one, scored as that backend scores (it applies no logit cap), read straight
  from the pool (sagespec.kernels' paged tree attention, planned once per step and window).
"""

from __future__ import annotations

import torch

from sagespec.kernels.paged_tree_attention import BlockLayout, PagedTreeAttentionPlan
from sagespec.plugins._hooks import Hook, Patches

POOL = "sglang.srt.mem_cache.memory_pool"
ALLOCATION = "sglang.srt.mem_cache.allocation"
SPEC_UTILS = "sglang.srt.speculative.spec_utils"
TORCH_NATIVE = "sglang.srt.layers.attention.torch_native_backend"

HOOKS = (
    Hook(f"{POOL}:MHATokenToKVPool._init_kv_copy_and_warmup"),
    Hook(
        f"{ALLOCATION}:assign_req_to_token_pool_func",
        params=("req_pool_indices", "req_to_token", "start_offset", "end_offset", "out_cache_loc", "batch_size"),
    ),
    Hook(f"{SPEC_UTILS}:assign_req_to_token_pool_func"),
    Hook(
        f"{TORCH_NATIVE}:TorchNativeAttnBackend.forward_extend",
        params=("q", "k", "v", "layer", "forward_batch", "save_kv_cache"),
    ),
    Hook(f"{POOL}:KVWriteLoc", kind="class"),
)


def sage_active() -> bool:
    try:
        from sglang.srt.runtime_context import get_spec

        return (get_spec().speculative_algorithm or "").upper() == "SAGE"
    except Exception:  # no published config in this process: not an engine process
        return False


def assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size):
    """req_to_token[pool[b], start[b]:end[b]] = the next end[b]-start[b] entries of out_cache_loc."""
    offset = 0
    for b in range(int(batch_size)):
        start, end = int(start_offset[b]), int(end_offset[b])
        req_to_token[int(req_pool_indices[b]), start:end] = out_cache_loc[offset : offset + end - start].to(
            req_to_token.dtype
        )
        offset += end - start


def _skip_warmup(original):
    def init_kv_copy_and_warmup(self):
        if sage_active():
            self._kv_copy_config = None
            return None
        return original(self)

    return init_kv_copy_and_warmup


def _assign(original):
    def assign_req_to_token_pool_func(
        req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size
    ):
        if sage_active():
            return assign_req_to_token_pool(
                req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size
            )
        return original(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)

    return assign_req_to_token_pool_func


def layer_window(layer) -> int | None:
    """The layer's window in tokens (a query sees keys q - k < window), or None. SGLang stores one
    less: its layers attend to keys k >= q - sliding_window_size."""
    size = getattr(layer, "sliding_window_size", None)
    return None if size is None or size < 0 else int(size) + 1


def unsupported_attention(model, model_config) -> str | None:
    """What in the model tree verification cannot reproduce, or None: it reproduces the torch-native
    backend's decoder self-attention over one KV pool, with sliding windows."""
    if getattr(model_config, "is_hybrid_swa", False):
        return "a hybrid sliding-window KV pool (sliding layers keep only their window)"
    if getattr(model_config, "model_is_mrope", False):
        return "M-RoPE positions (tree nodes' 3-D positions are not written yet)"
    for name, module in model.named_modules():
        if isinstance(getattr(module, "sinks", None), torch.Tensor):
            return f"attention sinks ({name})"
        if getattr(module, "is_cross_attention", False):
            return f"cross-attention ({name})"
        kind = getattr(module, "attn_type", None)
        if kind is not None and str(kind).lower().rsplit(".", 1)[-1] != "decoder":
            return f"{kind} attention ({name})"
    return None


def tree_verify_attention(backend, q, k, v, layer, forward_batch):
    """TARGET_VERIFY rows of a sage batch: write the tree tokens' KV, then attend over each request's
    prefix and tree straight from the pool, with a plan built once per step (at the first layer)."""
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    pool = backend.token_to_kv_pool
    if k is not None and v is not None:
        pool.set_kv_buffer(layer, KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc), k, v)
    spec = forward_batch.spec_info
    window = layer_window(layer)
    if window not in spec.sage_plans:
        rows = backend.req_to_token_pool.req_to_token
        pools, n = forward_batch.req_pool_indices.tolist(), spec.draft_token_num
        spec.sage_plans[window] = PagedTreeAttentionPlan.build(
            BlockLayout.token_pool(layer.qk_head_dim),
            spec.sage_trees,
            forward_batch.seq_lens.tolist(),
            [b * n for b in range(len(pools))],
            [rows[p] for p in pools],
            window=window,
        )
    q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)
    out = torch.zeros(q_.shape[0], layer.tp_q_head_num * layer.v_head_dim, dtype=q.dtype)  # pads' rows stay 0
    # No logit cap: the scores must be the engine's own, and SGLang's torch-native attention applies
    # none (it ignores `layer.logit_cap`, e.g. Gemma 2's).
    spec.sage_plans[window].run_token_pool(
        q_, pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id), out, scale=layer.scaling
    )
    return out


def _attention(original):
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, *args, **kwargs):
        if (
            forward_batch.forward_mode.is_target_verify()
            and getattr(forward_batch.spec_info, "sage_trees", None) is not None
        ):
            return tree_verify_attention(self, q, k, v, layer, forward_batch)
        return original(self, q, k, v, layer, forward_batch, save_kv_cache, *args, **kwargs)

    return forward_extend


def patches() -> Patches:
    p = Patches()
    p.add(f"{POOL}:MHATokenToKVPool", "_init_kv_copy_and_warmup", _skip_warmup)
    p.add(ALLOCATION, "assign_req_to_token_pool_func", _assign)
    p.add(SPEC_UTILS, "assign_req_to_token_pool_func", _assign)
    p.add(f"{TORCH_NATIVE}:TorchNativeAttnBackend", "forward_extend", _attention)
    return p
