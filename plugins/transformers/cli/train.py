"""`sagespec train-drafter`: an EAGLE-3-style head for a target, trained on ShareGPT (on CPU)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from sagespec.common.drafters import VISION_PRESETS, EagleHead, EagleHeadConfig
from sagespec.common.params import ConfigError
from sagespec.common.training.eagle_trainer import STATE_NAME, TrainConfig, train_eagle_head
from sagespec.plugins.transformers.cli.train_medusa import add_medusa_arguments, run_medusa
from sagespec.plugins.transformers.cli.train_shards import add_shard_arguments, run_shards
from sagespec.plugins.transformers.cli.train_vision import add_vision_arguments, run_vision
from sagespec.plugins.transformers.data.drafter_data import (
    cached_features,
    conversation_ids,
    extract_features,
    self_distilled_ids,
)
from sagespec.plugins.transformers.model_loading import cache_dir, load_model


def add_arguments(p) -> None:
    p.add_argument("--model", default="smollm2")
    p.add_argument(
        "--drafter",
        default="eagle",
        choices=["eagle", "medusa", *VISION_PRESETS],
        help="eagle: a text head on ShareGPT; medusa: heads distilled from the target's own answers; a vision drafter: head + vision modules on drawn images "
        "and the target's own answers (needs a vision-language --model, e.g. smollm2-llava)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["bfloat16", "float32"],
        help="target dtype while extracting features (float32 is faster on CPUs without bf16 units)",
    )
    p.add_argument("--out", required=True, help="checkpoint folder (resumed when it holds a trainer state)")
    p.add_argument("--conversations", type=int, default=2000)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument(
        "--self-distill",
        action="store_true",
        help="train on the target's own greedy answers to ShareGPT's first user turns",
    )
    p.add_argument(
        "--layers", default=None, help="target hidden-state ids to fuse, e.g. 2,15,27 (default: low, mid, high)"
    )
    p.add_argument("--draft-vocab", type=int, default=8192, help="reduced draft vocabulary size (0: the target's)")
    p.add_argument("--ttt-steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--checkpoint-minutes", type=float, default=5.0)
    p.add_argument("--adaspec-reference", help="a trained reference head folder: enables AdaSPEC selection")
    p.add_argument("--adaspec-top", type=float, default=0.4, help="AdaSPEC: fraction of tokens trained on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    add_vision_arguments(p)
    add_medusa_arguments(p)
    add_shard_arguments(p)


def default_layers(num_layers: int) -> tuple[int, int, int]:
    return (2, num_layers // 2, num_layers - 3)


def training_sequences(args, model, tok) -> list[list[int]]:
    if args.self_distill:
        return self_distilled_ids(model, tok, args.conversations, args.seq_len)
    return conversation_ids(tok, args.conversations, args.seq_len)


def run(args) -> int:
    if args.max_tokens is None and args.max_minutes is None:
        raise ConfigError("train-drafter needs a budget: --max-tokens N and/or --max-minutes M")
    if args.answers and args.drafter != "eagle":
        raise ConfigError(f"--answers trains an eagle head; --drafter {args.drafter} trains on its own data")
    if not args.answers:
        shard_only = {"--held-out": args.held_out, "--resize-draft-vocab": args.resize_draft_vocab}
        shard_only["--train-dtype"] = None if args.train_dtype == "float32" else args.train_dtype
        for flag, value in shard_only.items():
            if value is not None:
                raise ConfigError(f"{flag} goes with --answers (training on engine-made answers)")
    if args.drafter == "medusa":
        return run_medusa(args)
    if args.drafter != "eagle":
        return run_vision(args)
    if args.answers:
        return run_shards(args)
    torch.manual_seed(args.seed)
    model, tok = load_model(args.model, args.dtype)
    if tok is None:
        raise ConfigError(f"--model {args.model}: a tokenizer is needed to build training data")
    cfg = model.config
    layers = tuple(int(x) for x in args.layers.split(",")) if args.layers else default_layers(cfg.num_hidden_layers)
    fields = [args.model, args.dtype, args.conversations, args.seq_len, layers]
    if args.self_distill:
        fields.append("self-distill")
    key = hashlib.sha256(json.dumps(fields).encode())
    feats_path = cache_dir() / f"features-{key.hexdigest()[:16]}.pt"
    data = cached_features(feats_path, lambda: extract_features(model, training_sequences(args, model, tok), layers))
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    out = Path(args.out)
    if (out / STATE_NAME).is_file():
        head = EagleHead.load(out, embed, lm_head, cfg.num_hidden_layers)
    else:
        vocab = None if args.draft_vocab == 0 else args.draft_vocab
        head_cfg = EagleHeadConfig.for_target(cfg, layers, vocab)
        head_cfg.check_target(cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers)
        head = EagleHead.random(head_cfg, embed, lm_head, seed=args.seed)
        init_from_target(head, model, data.tokens[data.tokens > 0])
    w_draft = lm_head.float() if head.lm_head is None else lm_head.float()[head.d2t]
    reference = None
    if args.adaspec_reference:
        reference = EagleHead.load(args.adaspec_reference, embed, lm_head, cfg.num_hidden_layers).float()
    train_cfg = TrainConfig(
        steps=args.ttt_steps,
        lr=args.lr,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_minutes=args.max_minutes,
        checkpoint_minutes=args.checkpoint_minutes,
        seed=args.seed,
        adaspec_top=args.adaspec_top if reference is not None else None,
    )
    state = train_eagle_head(head.float(), data, w_draft, out, train_cfg, reference)
    print(
        json.dumps(
            {
                "out": str(out),
                "steps": state.step,
                "tokens_seen": state.tokens_seen,
                "minutes": round(state.seconds / 60, 2),
                "last": state.history[-1] if state.history else None,
            }
        )
    )
    return 0


def init_from_target(head: EagleHead, model, token_stream: torch.Tensor) -> None:
    """Draft vocabulary = the most frequent tokens of the training data; its output rows and the
    final norm start as the target's, so the head starts close to reading the target's logits."""
    with torch.no_grad():
        head.final_norm.copy_(model.model.norm.weight.float())
        if head.lm_head is None:
            return
        counts = torch.bincount(token_stream, minlength=head.config.vocab_size)
        d2t = torch.topk(counts, head.config.draft_vocab_size).indices.sort().values
        head.d2t.copy_(d2t)
        head.lm_head.weight.copy_(model.get_output_embeddings().weight.float()[d2t])
