"""Committing the accepted path's KV into contiguous slots.

After a tree verify, a request's cache holds prefix_len committed entries followed by one entry
per tree node. The accepted nodes (root first, in path order) move to slots prefix_len,
prefix_len + 1, ...; afterwards the committed length is prefix_len + len(accepted). Each accepted
node index is >= its position in the path, so an in-place forward copy never overwrites a source
it still needs."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def commit_accepted_kv(cache: torch.Tensor, prefix_len: int, accepted: Sequence[int], dim: int = 0) -> int:
    """In place on one request's cache (`dim` is the token axis). Returns the new committed length."""
    idx = torch.as_tensor(list(accepted), dtype=torch.long, device=cache.device)
    src = cache.index_select(dim, prefix_len + idx)
    cache.narrow(dim, prefix_len, idx.numel()).copy_(src)
    return prefix_len + idx.numel()


def commit_accepted_kv_ragged(
    cache: torch.Tensor, kv_indptr: torch.Tensor, prefix_lens: Sequence[int], accepted: Sequence[Sequence[int]]
) -> list[int]:
    """Batched form over a ragged [total_kv, ...] cache: request r's rows start at kv_indptr[r]."""
    starts = kv_indptr.tolist()
    src: list[int] = []
    dst: list[int] = []
    for r, (p, acc) in enumerate(zip(prefix_lens, accepted)):
        base = starts[r] + int(p)
        src.extend(base + int(a) for a in acc)
        dst.extend(base + j for j in range(len(acc)))
    src_t = torch.tensor(src, dtype=torch.long, device=cache.device)
    dst_t = torch.tensor(dst, dtype=torch.long, device=cache.device)
    cache.index_copy_(0, dst_t, cache.index_select(0, src_t))
    return [int(p) + len(a) for p, a in zip(prefix_lens, accepted)]
