"""Training an EagleHead on cached target features: budgets, progress, resumable checkpoints.

The data is a `FeatureSet` of padded sequences: per position the target's features at the head's
layers (`layer_feats`, concatenated), its final normed hidden state (`final_hidden`, to recompute
target logits over the draft vocabulary), the token ids and the real lengths.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F

from ..drafters.eagle_head import EagleHead
from .eagle_ttt import ttt_forward, ttt_loss

STATE_NAME = "trainer_state.pt"


@dataclass
class FeatureSet:
    layer_feats: torch.Tensor  # [N, T, len(layers) * target_hidden]
    final_hidden: torch.Tensor  # [N, T, target_hidden]
    tokens: torch.Tensor  # [N, T]
    lengths: torch.Tensor  # [N]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def save(self, path: str | Path) -> None:
        torch.save(asdict(self), path)

    @classmethod
    def load(cls, path: str | Path) -> FeatureSet:
        return cls(**torch.load(path))

    def batches(self, cfg: TrainConfig, gen: torch.Generator) -> Iterator[tuple[FeatureSet, torch.Tensor]]:
        """Endless random batches of cfg.batch_size sequences."""
        for batch in shuffled_batches(len(self), cfg.batch_size, gen):
            yield self, batch


def shuffled_batches(num_items: int, batch_size: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless batches of item indices, a fresh shuffle whenever fewer than a batch remain."""
    order = torch.empty(0, dtype=torch.long)
    while True:
        if order.numel() < batch_size:
            order = torch.randperm(num_items, generator=gen)
        batch, order = order[:batch_size], order[batch_size:]
        yield batch


@dataclass
class TrainConfig:
    steps: int = 4  # training-time-test unroll
    decay: float = 0.8
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 4
    max_tokens: int | None = None  # tokens seen (real positions) before stopping
    max_minutes: float | None = None
    checkpoint_minutes: float = 5.0
    seed: int = 0
    adaspec_top: float | None = None  # AdaSPEC: train only on this top fraction of KL gap
    warmup_steps: int = 0  # linear warm-up from 0 (a fresh optimizer on a trained head needs a few)
    schedule: str = "constant"  # or "cosine": lr -> lr * min_lr_ratio over schedule_tokens
    schedule_tokens: int | None = None  # tokens of this phase the cosine spans (default max_tokens)
    min_lr_ratio: float = 0.1
    batch_tokens: int = 2048  # padded tokens a batch, for sources batched by length (shards)
    compute_dtype: str = "float32"  # "bfloat16": matmuls under CPU autocast, fp32 weights and optimizer

    def lr_at(self, step_in_phase: int, tokens_in_phase: int) -> float:
        warm = min(1.0, (step_in_phase + 1) / self.warmup_steps) if self.warmup_steps else 1.0
        if self.schedule == "constant":
            return self.lr * warm
        if self.schedule != "cosine":
            raise ValueError(f"schedule {self.schedule!r} is unknown; allowed: constant, cosine")
        span = self.schedule_tokens or self.max_tokens
        if not span:
            raise ValueError("a cosine schedule needs schedule_tokens or max_tokens")
        frac = min(1.0, tokens_in_phase / span)
        floor = self.min_lr_ratio
        return self.lr * warm * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))


@dataclass
class TrainState:
    step: int = 0
    tokens_seen: int = 0
    seconds: float = 0.0
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (tokens_seen, loss, step-0 agreement)
    phase_start_step: int = 0  # where this run's schedule started (a resumed run keeps it)
    phase_start_tokens: int = 0
    phase_start_seconds: float = 0.0
    evals: list[dict] = field(default_factory=list)  # held-out measurements at checkpoints


def batch_tensors(
    data: FeatureSet, idx: torch.Tensor, w_draft: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the sequences `idx`: the target's layer features (before the head's fusion) and the
    tokens, target logits and validity mask that ttt_loss takes, padded by `steps` positions."""
    lengths = data.lengths[idx]
    t_len = int(lengths.max()) - 1
    feats = data.layer_feats[idx, :t_len].float()
    tokens = F.pad(data.tokens[idx, 1 : t_len + 1], (0, steps))
    with torch.no_grad():
        target_logits = F.pad(data.final_hidden[idx, 1 : t_len + 1].float() @ w_draft.T, (0, 0, 0, steps))
    pos = torch.arange(1, t_len + 1 + steps)
    valid = pos[None, :] < lengths[:, None]
    return feats, tokens, target_logits, valid


def adaspec_weights(
    head: EagleHead,
    reference: EagleHead,
    raw_feats: torch.Tensor,
    tokens: torch.Tensor,
    target_logits: torch.Tensor,
    valid: torch.Tensor,
    top: float,
) -> torch.Tensor:
    """AdaSPEC selection (step 0): 1 on the top fraction of real positions by the KL gap
    KL(p || q_draft) - KL(p || q_ref) = sum p (log q_ref - log q_draft), else 0."""
    with torch.no_grad():
        t_len = raw_feats.shape[1]
        logq = [
            F.log_softmax(h.draft_logits(ttt_forward(h, h.fuse(raw_feats), tokens, 1)[0]), -1)
            for h in (head, reference)
        ]
        p = F.softmax(target_logits[:, :t_len].float(), -1)
        gap = (p * (logq[1] - logq[0])).sum(-1)
        v = valid[:, :t_len]
        k = max(1, math.ceil(top * int(v.sum())))
        thresh = torch.topk(gap[v], k).values[-1]
        w = torch.zeros(valid.shape, dtype=torch.float32)
        w[:, :t_len] = ((gap >= thresh) & v).float()
        return w


def budget_spent(cfg: TrainConfig, state: TrainState, start: float, elapsed_before: float) -> bool:
    """The token or time budget is spent; `elapsed_before` seconds were spent before `start`.
    Budgets count this phase's tokens and minutes when the run resumed a shipped head."""
    minutes = (elapsed_before + time.perf_counter() - start - state.phase_start_seconds) / 60
    return (cfg.max_tokens is not None and state.tokens_seen - state.phase_start_tokens >= cfg.max_tokens) or (
        cfg.max_minutes is not None and minutes >= cfg.max_minutes
    )


def budget_batches(
    num_items: int, cfg: TrainConfig, state: TrainState, gen: torch.Generator, start: float, elapsed_before: float
) -> Iterator[torch.Tensor]:
    """shuffled_batches until the token or time budget is spent (checked before each draw, so the
    generator's saved state is the one after the last batch trained on)."""
    batches = shuffled_batches(num_items, cfg.batch_size, gen)
    while not budget_spent(cfg, state, start, elapsed_before):
        yield next(batches)


class BatchSource(Protocol):
    def batches(self, cfg: TrainConfig, gen: torch.Generator) -> Iterator[tuple[FeatureSet, torch.Tensor]]: ...


def train_eagle_head(
    head: EagleHead,
    data: BatchSource,
    w_draft: torch.Tensor,
    out_dir: str | Path,
    cfg: TrainConfig,
    reference: EagleHead | None = None,
    progress: bool = True,
    log: Callable[[str], object] = print,
    start_state: TrainState | None = None,
    evaluate: Callable[[EagleHead], dict] | None = None,
) -> TrainState:
    """Trains in place; resumes from out_dir's trainer state when present, else starts at
    `start_state` (a shipped head's recorded step and tokens; budgets and the schedule count from
    there). Saves the head (config.json + model.safetensors) and the trainer state at each
    checkpoint and at the end; `evaluate` (held-out acceptance) runs at each and is kept in
    `state.evals` with the tokens, minutes and mean recent loss."""
    from tqdm import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = TrainState() if start_state is None else start_state
    state.phase_start_step, state.phase_start_tokens, state.phase_start_seconds = (
        state.step,
        state.tokens_seen,
        state.seconds,
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    if (out_dir / STATE_NAME).is_file():
        saved = torch.load(out_dir / STATE_NAME, weights_only=False)
        head.load_state_dict(saved["head"])
        opt.load_state_dict(saved["optimizer"])
        state = TrainState(**saved["state"])
        gen.set_state(saved["generator"])
        log(f"resumed at step {state.step}, {state.tokens_seen} tokens seen")
    if cfg.adaspec_top is not None and reference is None:
        raise ValueError("AdaSPEC (adaspec_top) needs a reference head trained first")
    head.train()
    start, last_ckpt = time.perf_counter(), time.perf_counter()
    elapsed0 = state.seconds
    total = None if cfg.max_tokens is None else state.phase_start_tokens + cfg.max_tokens
    bar = tqdm(total=total, initial=state.tokens_seen, unit="tok", disable=not progress, desc="train-drafter")
    batches = data.batches(cfg, gen)

    def checkpoint() -> None:
        state.seconds = elapsed0 + time.perf_counter() - start
        if evaluate is not None:
            recent = [loss for _, loss, _ in state.history[-50:]]
            row = {"tokens_seen": state.tokens_seen, "step": state.step, "minutes": round(state.seconds / 60, 1)}
            row["loss"] = round(sum(recent) / max(len(recent), 1), 4)
            state.evals.append({**row, **evaluate(head)})
            log(json.dumps(state.evals[-1]))
            head.train()
        save_checkpoint(head, opt, state, gen, out_dir)

    while not budget_spent(cfg, state, start, elapsed0):
        batch_data, idx = next(batches)
        feats, tokens, target_logits, valid = batch_tensors(batch_data, idx, w_draft, cfg.steps)
        weights: torch.Tensor | None = None
        if cfg.adaspec_top is not None:
            assert reference is not None  # checked before the loop
            weights = adaspec_weights(head, reference, feats, tokens, target_logits, valid, cfg.adaspec_top)
        for group in opt.param_groups:
            group["lr"] = cfg.lr_at(state.step - state.phase_start_step, state.tokens_seen - state.phase_start_tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.compute_dtype == "bfloat16"):
            loss, accs = ttt_loss(head, head.fuse(feats), tokens, target_logits, valid, cfg.steps, cfg.decay, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        n_tok = int(valid[:, : feats.shape[1]].sum())
        state.step += 1
        state.tokens_seen += n_tok
        state.history.append((state.tokens_seen, float(loss.detach()), accs[0]))
        bar.update(n_tok)
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc0=f"{accs[0]:.2f}", acc_last=f"{accs[-1]:.2f}")
        if time.perf_counter() - last_ckpt >= cfg.checkpoint_minutes * 60:
            checkpoint()
            last_ckpt = time.perf_counter()
    bar.close()
    checkpoint()
    head.eval()
    return state


def save_checkpoint(
    head: EagleHead, opt: torch.optim.Optimizer, state: TrainState, gen: torch.Generator, out_dir: Path
) -> None:
    head.save(out_dir)
    torch.save(
        {
            "head": head.state_dict(),
            "optimizer": opt.state_dict(),
            "state": asdict(state),
            "generator": gen.get_state(),
        },
        out_dir / STATE_NAME,
    )
    (out_dir / "training_log.json").write_text(json.dumps(asdict(state)))
