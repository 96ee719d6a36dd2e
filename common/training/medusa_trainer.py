"""Training Medusa heads by distillation: on the target's own text (its greedy answers), head i at
position t learns token t + 2 + i from the target's final normed hidden state there. Only the
residual blocks train; the output layer is the target's (frozen). Loss weights fall by
HEAD_DECAY per head, as in Medusa. Positions are sampled per batch, so a step's output-layer pass
stays small."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..drafters.medusa import MedusaHeads
from .eagle_trainer import FeatureSet

HEAD_DECAY = 0.8


@dataclass
class MedusaTrainConfig:
    lr: float = 1e-3
    batch_size: int = 8  # sequences per step
    positions: int = 512  # positions sampled per step
    max_tokens: int | None = None  # positions seen before stopping
    max_minutes: float | None = None
    seed: int = 0


@dataclass
class MedusaTrainReport:
    steps: int = 0
    positions_seen: int = 0
    seconds: float = 0.0
    history: list[dict] = field(default_factory=list)  # per report: loss, each head's top-1 accuracy

    def to_dict(self) -> dict:
        return asdict(self)


def draft_labels(
    tokens: torch.Tensor, lengths: torch.Tensor, num_heads: int, d2t: torch.Tensor, vocab: int
) -> torch.Tensor:
    """(labels [K, N, T] in draft-vocabulary columns, -100 where none: past the sequence's end or a
    token outside the draft vocabulary)."""
    t2d = torch.full((vocab,), -100, dtype=torch.long)
    t2d[d2t] = torch.arange(d2t.numel())
    n, t = tokens.shape
    labels = torch.full((num_heads, n, t), -100, dtype=torch.long)
    valid = torch.arange(t)[None] < lengths[:, None]  # [N, T]
    for i in range(num_heads):
        shift = i + 2
        if shift >= t:
            break
        ok = valid[:, shift:]
        labels[i, :, :-shift] = torch.where(ok, t2d[tokens[:, shift:]], -100)
    return labels


def train_medusa_heads(heads: MedusaHeads, data: FeatureSet, cfg: MedusaTrainConfig) -> MedusaTrainReport:
    if cfg.max_tokens is None and cfg.max_minutes is None:
        raise ValueError("train_medusa_heads needs a budget: max_tokens and/or max_minutes")
    gen = torch.Generator().manual_seed(cfg.seed)
    k, vocab = heads.config.num_heads, heads.config.vocab_size
    labels = draft_labels(data.tokens, data.lengths, k, heads.d2t, vocab)
    weight = heads.output_weight().float()
    heads.float().train()
    opt = torch.optim.AdamW(heads.blocks.parameters(), lr=cfg.lr)
    report, start = MedusaTrainReport(), time.perf_counter()
    head_weights = torch.tensor([HEAD_DECAY**i for i in range(k)])
    total = cfg.max_tokens or 0
    bar = tqdm(total=total or None, desc="medusa heads", unit="pos")
    while True:
        minutes = (time.perf_counter() - start) / 60
        if (cfg.max_tokens is not None and report.positions_seen >= cfg.max_tokens) or (
            cfg.max_minutes is not None and minutes >= cfg.max_minutes
        ):
            break
        rows = torch.randint(len(data), (cfg.batch_size,), generator=gen)
        feats = data.final_hidden[rows].float()  # [B, T, H]
        lab = labels[:, rows]  # [K, B, T]
        usable = (lab[0] != -100).nonzero()  # head 0 has the most positions
        if usable.shape[0] == 0:
            continue
        pick = usable[torch.randperm(usable.shape[0], generator=gen)[: cfg.positions]]
        h = feats[pick[:, 0], pick[:, 1]]  # [P, H]
        y = lab[:, pick[:, 0], pick[:, 1]]  # [K, P]
        logits = heads.hidden(h) @ weight.T  # [K, P, Vd]
        losses = torch.stack([F.cross_entropy(logits[i], y[i], ignore_index=-100) for i in range(k)])
        losses = torch.nan_to_num(losses)  # a head with no label in the batch
        loss = (losses * head_weights).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        report.steps += 1
        report.positions_seen += int(pick.shape[0])
        bar.update(int(pick.shape[0]))
        if report.steps % 20 == 1:
            with torch.no_grad():
                hit = (logits.argmax(-1) == y) & (y != -100)
                acc = (hit.sum(-1) / (y != -100).sum(-1).clamp_min(1)).tolist()
            report.history.append(
                {
                    "positions": report.positions_seen,
                    "loss": round(float(loss.detach()), 4),
                    "top1": [round(a, 4) for a in acc],
                }
            )
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", top1="/".join(f"{a:.2f}" for a in acc))
    bar.close()
    report.seconds = time.perf_counter() - start
    heads.eval()
    return report


@torch.no_grad()
def head_accuracy(heads: MedusaHeads, data: FeatureSet, max_rows: int = 64) -> list[float]:
    """Each head's top-1 accuracy over the first `max_rows` sequences (every labelled position)."""
    k = heads.config.num_heads
    labels = draft_labels(data.tokens[:max_rows], data.lengths[:max_rows], k, heads.d2t, heads.config.vocab_size)
    weight = heads.output_weight().float()
    hits, counts = torch.zeros(k), torch.zeros(k)
    for r in range(min(max_rows, len(data))):
        logits = heads.float().hidden(data.final_hidden[r].float()) @ weight.T  # [K, T, Vd]
        y = labels[:, r]
        ok = y != -100
        hits += ((logits.argmax(-1) == y) & ok).sum(-1)
        counts += ok.sum(-1)
    return (hits / counts.clamp_min(1)).tolist()
