"""The target's entropy where each request's bonus token was sampled, computed for those rows only.

A policy that reads entropy needs one number per request and step: the entropy of the logits row
the bonus token came from. Which row that is depends on how many drafts vLLM's sampler accepts,
known only after it ran, and the sampler may change logits in place. So the rows of the requests
vLLM verifies are copied before sampling (a copy is cheaper than a softmax over the vocabulary)
and only each request's bonus row is reduced afterwards: B softmaxes a step, not one per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sagespec.common.sampling import entropy


def logits_row_starts(num_reqs: int, spec_decode_metadata) -> list[int]:
    """The first logits row of each request, and the end (num_reqs + 1 entries): one row per
    request without drafts, drafts + 1 with them (vLLM's own cumulative count)."""
    if spec_decode_metadata is None:
        return list(range(num_reqs + 1))
    return [0, *spec_decode_metadata.cu_num_sampled_tokens[:num_reqs].tolist()]


@dataclass
class KeptRows:
    """Copies of the logits rows of some requests, taken before sampling."""

    requests: list[int]  # request indices, in batch order
    row_starts: list[int]  # first logits row of every request, and the end
    copies: torch.Tensor  # [rows of the listed requests, vocab], request-major

    @classmethod
    def take(cls, logits: torch.Tensor, row_starts: list[int], requests: Sequence[int]) -> KeptRows | None:
        requests = list(requests)
        if not requests:
            return None
        index = torch.cat([torch.arange(row_starts[i], row_starts[i + 1]) for i in requests])
        return cls(requests, row_starts, logits.index_select(0, index.to(logits.device)))

    def fill_bonus_entropies(self, out: torch.Tensor, sampled_token_ids: torch.Tensor) -> None:
        """out[row] = entropy at each kept request's bonus row; `sampled_token_ids` [B, k] holds each
        request's emitted tokens padded with -1 (vLLM's sampler output)."""
        emitted = (sampled_token_ids[self.requests] != -1).sum(-1).cpu().tolist()
        picks, rows, offset = [], [], 0
        for i, n in zip(self.requests, emitted):
            span = self.row_starts[i + 1] - self.row_starts[i]
            if n:  # a request whose sampled token is discarded (a prefill chunk) emits nothing
                picks.append(offset + n - 1)
                rows.append(self.row_starts[i] + n - 1)
            offset += span
        if picks:
            out[rows] = entropy(self.copies[picks]).to(out.dtype).cpu()
