"""`sagespec train-drafter --drafter medusa`: Medusa heads distilled from the target's own answers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from sagespec.common.drafters.medusa import MedusaHeads
from sagespec.common.params import ConfigError, check_int
from sagespec.common.training.medusa_trainer import MedusaTrainConfig, head_accuracy, train_medusa_heads
from sagespec.plugins.transformers.data.drafter_data import cached_features, extract_features, self_distilled_ids
from sagespec.plugins.transformers.model_loading import cache_dir, load_model

HELD_OUT = 32  # sequences kept out of training to report each head's accuracy


def add_medusa_arguments(p) -> None:
    p.add_argument("--medusa-heads-count", type=int, default=4, help="medusa: heads (tokens t+2 .. t+1+K)")
    p.add_argument("--medusa-layers", type=int, default=1, help="medusa: residual blocks per head")


def run_medusa(args) -> int:
    check_int("--medusa-heads-count", "heads", args.medusa_heads_count, 1, 16)
    check_int("--medusa-layers", "layers", args.medusa_layers, 1, 8)
    torch.manual_seed(args.seed)
    model, tok = load_model(args.model, args.dtype)
    if tok is None:
        raise ConfigError(f"--model {args.model}: a tokenizer is needed to build training data")
    cfg = model.config.get_text_config()
    final = (cfg.num_hidden_layers,)  # hidden-state output L: the final normed hidden state
    key = hashlib.sha256(json.dumps([args.model, args.dtype, args.conversations, args.seq_len, "medusa"]).encode())
    path = cache_dir() / f"features-{key.hexdigest()[:16]}.pt"

    def build():
        return extract_features(model, self_distilled_ids(model, tok, args.conversations, args.seq_len), final)

    data = cached_features(path, build)
    if len(data) <= HELD_OUT:
        raise ConfigError(f"--conversations {args.conversations}: need more than {HELD_OUT} usable sequences")
    train, held = _split(data, HELD_OUT)
    lm_head = model.get_output_embeddings().weight.detach()
    vocab = None
    if args.draft_vocab:
        counts = torch.bincount(train.tokens[train.tokens > 0], minlength=cfg.vocab_size)
        vocab = torch.topk(counts, min(args.draft_vocab, cfg.vocab_size)).indices
    heads = MedusaHeads.for_target(cfg, lm_head.float(), args.medusa_heads_count, args.medusa_layers, vocab)
    before = head_accuracy(heads, held)
    report = train_medusa_heads(
        heads,
        train,
        MedusaTrainConfig(lr=args.lr, max_tokens=args.max_tokens, max_minutes=args.max_minutes, seed=args.seed),
    )
    after = head_accuracy(heads, held)
    out = Path(args.out)
    heads.save(out)
    summary = {
        "out": str(out),
        "steps": report.steps,
        "positions_seen": report.positions_seen,
        "minutes": round(report.seconds / 60, 2),
        "held_out_top1_before": [round(a, 4) for a in before],
        "held_out_top1_after": [round(a, 4) for a in after],
        "data": f"the target's greedy answers to {len(data)} ShareGPT first turns, cut at {args.seq_len} tokens",
    }
    (out / "training.json").write_text(json.dumps({**summary, "history": report.history}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


def _split(data, held: int):
    from sagespec.common.training.eagle_trainer import FeatureSet

    def rows(sl):
        return FeatureSet(data.layer_feats[sl], data.final_hidden[sl], data.tokens[sl], data.lengths[sl])

    return rows(slice(held, None)), rows(slice(0, held))
