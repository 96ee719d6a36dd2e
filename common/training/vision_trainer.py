"""Training a VisionDrafter (its EAGLE head and vision modules) on image + answer sequences.

Each example is laid out exactly as the drafter lays out a prompt at inference (`prompt_entries`:
the kept image rows or the adaptor token, text at its original positions), then unrolled with
training-time test over those entries. Losses count only chains that start after the last image
(drafting starts there at inference), i.e. the answer and the question's tail. With DREAM's
supervision the head's step-0 hidden state before the cross-attention injection is also regressed
(SmoothL1, weight `supervise_weight`) onto the target layer chosen per position by attention entropy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..drafters.base import ImageInputs
from ..drafters.vision import VisionDrafter
from .eagle_trainer import TrainConfig, TrainState, budget_batches
from .eagle_ttt import ttt_loss

VISION_STATE_NAME = "vision_trainer_state.pt"


@dataclass
class VisionExample:
    tokens: torch.Tensor  # [L] prompt (image placeholders included) + answer
    layer_feats: torch.Tensor  # [L, len(layers) * H] the target's features at the head's layers
    final_hidden: torch.Tensor  # [L, H] the target's final normed hidden state
    images: ImageInputs
    prompt_len: int
    supervise: torch.Tensor | None = None  # [L, H] DREAM: the lowest-entropy layer's hidden state

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["images"] = {"spans": list(self.images.spans), "embeds": self.images.embeds, "saliency": self.images.saliency}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VisionExample:
        im = d["images"]
        return cls(**{**d, "images": ImageInputs(tuple(tuple(s) for s in im["spans"]), im["embeds"], im["saliency"])})


def example_loss(
    drafter: VisionDrafter, ex: VisionExample, w_draft: torch.Tensor, steps: int, decay: float, supervise_weight: float
) -> tuple[torch.Tensor, list[float]]:
    """(loss, per-step agreement) of one example."""
    head = drafter.head
    drafter.begin()
    length = ex.tokens.numel()
    feats = ex.layer_feats.float()
    idx, embeds = drafter.prompt_entries(ex.tokens, feats[: length - 1], ex.images)
    positions = idx + 1
    fused = drafter.features(feats[idx])
    tokens = F.pad(ex.tokens[idx + 1], (0, steps))
    with torch.no_grad():
        target_logits = F.pad(ex.final_hidden[positions.clamp_max(length - 1)].float() @ w_draft.T, (0, 0, 0, steps))
    after_image = positions >= ex.images.spans[-1][1]
    valid = F.pad(positions < length - 1, (0, steps))  # entry at p predicts token p + 1
    middle: list[torch.Tensor] = []

    def refine(hidden: torch.Tensor) -> torch.Tensor:
        if not middle:
            middle.append(hidden)  # step 0, before the injection
        return drafter.refine(hidden)

    loss, accs = ttt_loss(
        head,
        fused[None],
        tokens[None],
        target_logits[None],
        valid[None],
        steps,
        decay,
        start_mask=after_image[None],
        positions=positions[None],
        embeds=embeds[None],
        refine=refine,
    )
    if ex.supervise is not None and supervise_weight > 0:
        keep = after_image & (positions < length)
        target = ex.supervise[positions[keep]].float()
        loss = loss + supervise_weight * F.smooth_l1_loss(middle[0][0][keep], target)
    return loss, accs


def train_vision_drafter(
    drafter: VisionDrafter,
    examples: list[VisionExample],
    w_draft: torch.Tensor,
    out_dir: str | Path,
    cfg: TrainConfig,
    supervise_weight: float = 0.2,
    progress: bool = True,
    log: Callable[[str], object] = print,
) -> TrainState:
    """Trains head and vision modules in place (cfg.batch_size examples per optimizer step);
    resumes from out_dir's state; saves both (head files + vision files) at checkpoints and the end."""
    from tqdm import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    params = [p for m in (drafter.head, drafter.modules) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    state, gen = TrainState(), torch.Generator().manual_seed(cfg.seed)
    if (out_dir / VISION_STATE_NAME).is_file():
        saved = torch.load(out_dir / VISION_STATE_NAME, weights_only=False)
        drafter.head.load_state_dict(saved["head"])
        drafter.modules.load_state_dict(saved["modules"])
        opt.load_state_dict(saved["optimizer"])
        state = TrainState(**saved["state"])
        gen.set_state(saved["generator"])
        log(f"resumed at step {state.step}, {state.tokens_seen} tokens seen")
    drafter.head.train()
    drafter.modules.train()
    start, last_ckpt, elapsed0 = time.perf_counter(), time.perf_counter(), state.seconds
    bar = tqdm(
        total=cfg.max_tokens, initial=state.tokens_seen, unit="tok", disable=not progress, desc="train-drafter (vision)"
    )
    for batch in budget_batches(len(examples), cfg, state, gen, start, elapsed0):
        opt.zero_grad(set_to_none=True)
        losses, acc0, n_tok = [], [], 0
        for i in batch.tolist():
            loss, accs = example_loss(drafter, examples[i], w_draft, cfg.steps, cfg.decay, supervise_weight)
            (loss / len(batch)).backward()
            losses.append(float(loss.detach()))
            acc0.append(accs[0])
            n_tok += examples[i].tokens.numel() - examples[i].prompt_len
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state.step += 1
        state.tokens_seen += n_tok
        mean_loss, mean_acc = sum(losses) / len(losses), sum(acc0) / len(acc0)
        state.history.append((state.tokens_seen, mean_loss, mean_acc))
        bar.update(n_tok)
        bar.set_postfix(loss=f"{mean_loss:.3f}", acc0=f"{mean_acc:.2f}")
        if time.perf_counter() - last_ckpt >= cfg.checkpoint_minutes * 60:
            state.seconds = elapsed0 + time.perf_counter() - start
            _save(drafter, opt, state, gen, out_dir)
            last_ckpt = time.perf_counter()
    bar.close()
    state.seconds = elapsed0 + time.perf_counter() - start
    _save(drafter, opt, state, gen, out_dir)
    drafter.head.eval()
    drafter.modules.eval()
    return state


def _save(
    drafter: VisionDrafter, opt: torch.optim.Optimizer, state: TrainState, gen: torch.Generator, out_dir: Path
) -> None:
    drafter.head.save(out_dir)
    drafter.modules.save(out_dir)
    torch.save(
        {
            "head": drafter.head.state_dict(),
            "modules": drafter.modules.state_dict(),
            "optimizer": opt.state_dict(),
            "state": asdict(state),
            "generator": gen.get_state(),
        },
        out_dir / VISION_STATE_NAME,
    )
    (out_dir / "training_log.json").write_text(json.dumps(asdict(state)))
