"""Greedy-chain acceptance of a head measured offline, on the target's own greedy answers.

Over a greedy answer, greedy chain decoding is fully determined: after a verify that accepted k
drafts the bonus token is the answer's next token, the head's context holds the target's real
features, and a drafted token is accepted iff it equals the answer's token at its place. So the
training-time-test forward over the whole sequence gives every draft a chain would make, and
walking the answer (start after the prompt, advance k + 1 each verify) gives the same tau a
decoding run of the same answer would give, without the target's forwards.
"""

from __future__ import annotations

import torch

from ..drafters.eagle_head import EagleHead
from .eagle_ttt import ttt_forward
from .feature_shards import PackedFeatures, length_buckets


@torch.no_grad()
def chain_matches(head: EagleHead, data: PackedFeatures, idx: torch.Tensor, depth: int) -> torch.Tensor:
    """[B, T, depth] bool: at pair t (features of position t, token t+1), draft step j equals token
    t+2+j. T = longest length - 1; False past each sequence's end."""
    fs = data.padded(idx)
    t_len = int(fs.lengths.max()) - 1
    tokens = torch.nn.functional.pad(fs.tokens[:, 1 : t_len + 1], (0, depth))
    outs = ttt_forward(head, head.fuse(fs.layer_feats[:, :t_len].to(head.fc.weight.dtype)), tokens, depth)
    drafts = torch.stack([head.draft_logits(h).argmax(-1) for h in outs], -1)  # [B, T, depth]
    if head.lm_head is not None:
        drafts = head.d2t[drafts]
    padded = torch.nn.functional.pad(fs.tokens, (0, depth + 1))
    truth = torch.stack([padded[:, 2 + j : 2 + j + t_len] for j in range(depth)], -1)
    pos = torch.arange(t_len)[:, None] + 2 + torch.arange(depth)[None, :]
    real = pos[None] < fs.lengths[:, None, None]
    return (drafts == truth) & real


def walk_chain(matches: torch.Tensor, answer_start: int, length: int, max_new_tokens: int) -> tuple[int, int]:
    """(tokens emitted, verifies) of a greedy chain over one answer. matches [T, depth] from
    chain_matches; the first answer token comes from the prefill, as in decoding."""
    t, emitted, verifies = answer_start - 1, 1, 0
    last = min(length - 1, answer_start + max_new_tokens - 1)  # the last answer position decoded
    while t + 1 < last:
        row = matches[t]
        k = int(row.long().cumprod(0).sum())  # leading accepted drafts
        k = min(k, last - (t + 1) - 1)  # the step that reaches the budget emits no more than it
        emitted, verifies, t = emitted + k + 1, verifies + 1, t + k + 1
    return emitted, verifies


def offline_chain_tau(
    head: EagleHead, data: PackedFeatures, depth: int = 5, max_new_tokens: int = 128, batch_tokens: int = 8192
) -> dict:
    """Mean accepted length (tokens per verify, bonus included; the prefill's token not counted)
    of a depth-`depth` greedy chain over every answer in `data`, and the median per answer."""
    was_training = head.training
    head.eval()
    emitted = verifies = 0
    per_answer = []
    for idx in length_buckets(data.lengths, batch_tokens, torch.Generator().manual_seed(0)):
        m = chain_matches(head, data, idx, depth)
        for row, i in enumerate(idx.tolist()):
            e, v = walk_chain(m[row], int(data.answer_starts[i]), int(data.lengths[i]), max_new_tokens)
            if v:
                emitted, verifies = emitted + e - 1, verifies + v
                per_answer.append((e - 1) / v)
    head.train(was_training)
    per_answer.sort()
    return {
        "tau": emitted / max(verifies, 1),
        "emitted": emitted,
        "verifies": verifies,
        "median_answer_tau": per_answer[len(per_answer) // 2] if per_answer else 0.0,
        "answers": len(per_answer),
        "depth": depth,
    }
