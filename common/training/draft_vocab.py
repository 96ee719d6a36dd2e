"""The draft vocabulary sized by coverage of the target's own answers.

A head with a reduced draft vocabulary can never draft a token outside it, so the share of answer
tokens it covers bounds every step's acceptance. `answer_token_counts` counts the answer tokens of
answer shards (scripts/make_training_answers.py); `coverage` is the share of counted tokens a
vocabulary holds; `resize_draft_vocab` gives a head a new vocabulary, keeping the trained output
row of every token it already had and starting each new one at the target's row (as a fresh head's
rows start)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from ..drafters.eagle_head import EagleHead


def answer_token_counts(folder: str | Path, vocab_size: int) -> torch.Tensor:
    """How often each token id occurs in the answers of `folder`'s shard-*.jsonl files."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for path in sorted(Path(folder).glob("shard-*.jsonl")):
        for line in path.read_text().splitlines():
            ids = torch.tensor(json.loads(line)["answer"], dtype=torch.long)
            counts += torch.bincount(ids, minlength=vocab_size)
    return counts


def coverage(counts: torch.Tensor, token_ids: torch.Tensor) -> float:
    """Share of the counted tokens whose id is in token_ids."""
    total = int(counts.sum())
    return float(counts[token_ids].sum()) / total if total else 0.0


def most_frequent(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The `size` most frequent token ids, sorted by id (a draft-to-target map)."""
    if not 0 < size <= counts.numel():
        raise ValueError(f"draft vocabulary size {size}: allowed 1..{counts.numel()}")
    return torch.topk(counts, size).indices.sort().values


def resize_draft_vocab(head: EagleHead, d2t: torch.Tensor) -> EagleHead:
    """A copy of `head` drafting over the target tokens d2t (distinct ids, sorted). Every other
    weight is kept; output rows of tokens the head already drafted are kept, new ones are the
    target's output rows."""
    if head.lm_head is None:
        raise ValueError("the head drafts over the target's whole vocabulary; there is no draft vocabulary to resize")
    config = dataclasses.replace(head.config, draft_vocab_size=int(d2t.numel()))
    new = EagleHead(config, head._embed, head._target_lm_head)
    state = {k: v for k, v in head.state_dict().items() if k not in ("lm_head.weight", "d2t")}
    missing = new.load_state_dict(state, strict=False).missing_keys
    assert sorted(missing) == ["d2t", "lm_head.weight"], missing
    old_row = torch.full((config.vocab_size,), -1, dtype=torch.long)
    old_row[head.d2t] = torch.arange(head.d2t.numel())
    rows = old_row[d2t]
    kept = rows >= 0
    assert new.lm_head is not None  # config.draft_vocab_size is set
    with torch.no_grad():
        new.d2t.copy_(d2t)
        weight = head._target_lm_head[d2t].to(new.lm_head.weight.dtype).clone()
        weight[kept] = head.lm_head.weight[rows[kept]].to(weight.dtype)
        new.lm_head.weight.copy_(weight)
    return new.to(next(head.parameters()).dtype)
