"""Target features stored packed: every sequence's positions back to back, no padding.

A shard holds, for its sequences, the target's hidden states at the head's layers (`layer_feats`,
concatenated), its final normed hidden state (`final_hidden`), the token ids, each sequence's
offsets into them and where its answer starts (`answer_starts`, in positions: the first answer
token; prompt positions precede it). Features are bf16; a shard is one `torch.save` file, read
memory-mapped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .eagle_trainer import FeatureSet, TrainConfig


@dataclass
class PackedFeatures:
    layer_feats: torch.Tensor  # [P, len(layers) * h], P = all positions of all sequences
    final_hidden: torch.Tensor  # [P, h]
    tokens: torch.Tensor  # [P]
    offsets: torch.Tensor  # [N + 1]: sequence i owns positions offsets[i]:offsets[i+1]
    answer_starts: torch.Tensor  # [N]: first answer position within each sequence

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def num_positions(self) -> int:
        return int(self.offsets[-1])

    def padded(self, idx: torch.Tensor) -> FeatureSet:
        """The sequences `idx` as a padded FeatureSet (zeros past each length)."""
        lengths = self.lengths[idx]
        width = int(lengths.max())

        def gather(x: torch.Tensor) -> torch.Tensor:
            rows = [x[int(self.offsets[i]) : int(self.offsets[i + 1])] for i in idx.tolist()]
            pad = [(0, 0) * (x.dim() - 1) + (0, width - r.shape[0]) for r in rows]
            return torch.stack([F.pad(r, p) for r, p in zip(rows, pad)])

        return FeatureSet(gather(self.layer_feats), gather(self.final_hidden), gather(self.tokens).long(), lengths)

    def save(self, path: str | Path) -> None:
        tmp = Path(str(path) + ".tmp")
        torch.save(asdict(self), tmp)
        tmp.replace(path)  # a shard on disk is always whole

    @classmethod
    def load(cls, path: str | Path) -> PackedFeatures:
        return cls(**torch.load(path, mmap=True, weights_only=True))

    @classmethod
    def concat(cls, parts: list[PackedFeatures]) -> PackedFeatures:
        offsets = [parts[0].offsets[:1]] + [
            p.offsets[1:] + sum(q.num_positions for q in parts[:i]) for i, p in enumerate(parts)
        ]
        return cls(
            torch.cat([p.layer_feats for p in parts]),
            torch.cat([p.final_hidden for p in parts]),
            torch.cat([p.tokens for p in parts]),
            torch.cat(offsets),
            torch.cat([p.answer_starts for p in parts]),
        )

    @classmethod
    def pack(cls, sequences: list[FeatureSet], answer_starts: list[int]) -> PackedFeatures:
        """From padded FeatureSets (in order), keeping each sequence's real positions."""
        feats, finals, toks, lens = [], [], [], []
        for fs in sequences:
            for i in range(len(fs)):
                n = int(fs.lengths[i])
                feats.append(fs.layer_feats[i, :n])
                finals.append(fs.final_hidden[i, :n])
                toks.append(fs.tokens[i, :n])
                lens.append(n)
        offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
        offsets[1:] = torch.tensor(lens).cumsum(0)
        return cls(
            torch.cat(feats), torch.cat(finals), torch.cat(toks).to(torch.int32), offsets, torch.tensor(answer_starts)
        )


def length_buckets(lengths: torch.Tensor, max_tokens: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Sequences grouped into batches of similar length (sorted, then cut when a batch's padded
    size would pass max_tokens), in a random order. Every sequence is in exactly one batch."""
    order = torch.argsort(lengths + torch.rand(lengths.shape, generator=gen))  # ties broken at random
    batches: list[torch.Tensor] = []
    cur: list[int] = []
    width = 0
    for i in order.tolist():
        w = max(width, int(lengths[i]))
        if cur and w * (len(cur) + 1) > max_tokens:
            batches.append(torch.tensor(cur))
            cur, w = [], int(lengths[i])
        cur.append(i)
        width = w
    if cur:
        batches.append(torch.tensor(cur))
    perm = torch.randperm(len(batches), generator=gen)
    return [batches[i] for i in perm.tolist()]


class ShardSet:
    """Feature shards on disk as a training source: one shard in memory at a time, shards in a
    random order, each shard's sequences in length-bucketed batches of cfg.batch_tokens."""

    def __init__(self, paths: list[Path]) -> None:
        if not paths:
            raise ValueError("no feature shards to train on")
        self.paths = paths

    def batches(self, cfg: TrainConfig, gen: torch.Generator) -> Iterator[tuple[FeatureSet, torch.Tensor]]:
        while True:
            for s in torch.randperm(len(self.paths), generator=gen).tolist():
                shard = PackedFeatures.load(self.paths[s])
                for idx in length_buckets(shard.lengths, cfg.batch_tokens, gen):
                    yield shard.padded(idx), torch.arange(idx.numel())
