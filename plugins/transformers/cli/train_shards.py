"""`sagespec train-drafter --answers DIR`: an EAGLE head trained on the target's own answers made by
the engine (scripts/make_training_answers.py), over packed feature shards, resumable across
sessions.

Features are built first (resuming) under DIR/features. Training resumes from `--out`'s trainer
state; without one (a new machine) it starts from the shipped head at its recorded step and tokens.
At every checkpoint the head's greedy-chain tau is measured offline on the held-out answers
(`--held-out`, MT-Bench and HumanEval), and kept in the trainer state's `evals`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sagespec.common.drafters import EagleHead
from sagespec.common.machine import machine_info
from sagespec.common.params import ConfigError, check_int
from sagespec.common.shipped import shipped_head
from sagespec.common.training.draft_vocab import answer_token_counts, coverage, most_frequent, resize_draft_vocab
from sagespec.common.training.eagle_trainer import STATE_NAME, TrainConfig, TrainState, train_eagle_head
from sagespec.common.training.feature_shards import PackedFeatures, ShardSet
from sagespec.common.training.offline_acceptance import offline_chain_tau
from sagespec.plugins.transformers.data.answer_features import build_feature_shards
from sagespec.plugins.transformers.model_loading import load_model

HELD_OUT_SETS = ("mt-bench", "humaneval")
EVAL_DEPTH = 5  # the acceptance bar's chain depth
HELD_OUT_SEQ_LEN = 2048  # held-out answers are kept whole (the engine's max_model_len)


def add_shard_arguments(p) -> None:
    p.add_argument("--answers", help="answer shards from scripts/make_training_answers.py: train on them")
    p.add_argument("--held-out", help="held-out answers folder (make_training_answers.py --held-out)")
    p.add_argument("--feature-shards", type=int, default=None, help="build and train on the first N shards only")
    p.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens a batch (--answers)")
    p.add_argument("--schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--schedule-tokens", type=int, default=None, help="tokens the cosine spans (default --max-tokens)")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument(
        "--resize-draft-vocab",
        type=int,
        default=None,
        help="starting from the shipped head: draft over the K most frequent tokens of --answers' answers "
        "(kept output rows stay, new ones start as the target's)",
    )
    p.add_argument(
        "--train-dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="bfloat16: the head's matmuls under CPU autocast (weights and optimizer stay fp32); for CPUs with bf16 units",
    )


def held_out_features(model, folder: Path, layers, seq_len: int) -> dict[str, PackedFeatures]:
    out = {}
    for name in HELD_OUT_SETS:
        answers = folder / name
        if not answers.is_dir():
            raise ConfigError(f"--held-out {folder}: no {name}/ answers (make_training_answers.py --held-out)")
        manifest = build_feature_shards(model, answers, answers / "features", layers, seq_len)
        parts = [PackedFeatures.load(answers / "features" / s["file"]) for s in manifest["shards"] if s["file"]]
        if not parts:
            raise ConfigError(f"{answers}: no answers (make_training_answers.py --held-out)")
        out[name] = PackedFeatures.concat(parts)
    return out


def start_from_shipped(model_name: str, embed, lm_head, num_layers: int) -> tuple[EagleHead, TrainState, dict]:
    folder = shipped_head(model_name)
    if folder is None:
        raise ConfigError(f"--model {model_name}: no shipped head to start from; train one first (without --answers)")
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    head = EagleHead.load(folder, embed, lm_head, num_layers)
    state = TrainState(
        step=manifest["optimizer_steps"], tokens_seen=manifest["tokens_seen"], seconds=manifest["training_minutes"] * 60
    )
    return head, state, manifest


def resized(head: EagleHead, answers: Path, size: int, origin: str, held_out: str | None) -> tuple[EagleHead, dict]:
    """The head over the `size` most frequent answer tokens, and the coverage before and after (of
    the training answers and of each held-out set's)."""
    current = head.config.draft_vocab_size
    if origin == "checkpoint":
        if current != size:
            raise ConfigError(
                f"--resize-draft-vocab {size}: the checkpoint being resumed drafts over {current} tokens; "
                "resize only when starting from the shipped head (another --out)"
            )
        return head, {}
    vocab = head.config.vocab_size
    counts = {"train": answer_token_counts(answers, vocab)}
    if held_out:
        counts.update({name: answer_token_counts(Path(held_out) / name, vocab) for name in HELD_OUT_SETS})
    d2t = most_frequent(counts["train"], size)
    new = resize_draft_vocab(head, d2t)
    report = {
        "draft_vocab": {"before": current, "after": size},
        "coverage_before": {k: round(coverage(c, head.d2t), 4) for k, c in counts.items()},
        "coverage_after": {k: round(coverage(c, d2t), 4) for k, c in counts.items()},
    }
    print(json.dumps(report), flush=True)
    return new, report


def check_shard_arguments(args) -> None:
    answers = Path(args.answers)
    if not any(answers.glob("shard-*.jsonl")):
        raise ConfigError(
            f"--answers {answers}: no shard-*.jsonl answers (make them with scripts/make_training_answers.py)"
        )
    check_int("--batch-tokens", "padded tokens a batch", args.batch_tokens, 16, 1 << 20)
    check_int("--warmup-steps", "steps", args.warmup_steps, 0, 1 << 30)
    if args.feature_shards is not None:
        check_int("--feature-shards", "shards", args.feature_shards, 1, 1 << 20)
    if args.resize_draft_vocab is not None:
        check_int("--resize-draft-vocab", "draft tokens", args.resize_draft_vocab, 1, 1 << 20)
    if args.schedule == "cosine" and not (args.schedule_tokens or args.max_tokens):
        raise ConfigError("--schedule cosine needs --schedule-tokens N or --max-tokens N (the tokens it spans)")


def run_shards(args) -> int:
    check_shard_arguments(args)
    torch.manual_seed(args.seed)
    model, _ = load_model(args.model, args.dtype)
    cfg = model.config
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    out = Path(args.out)
    start_state, origin = None, "checkpoint"
    if (out / STATE_NAME).is_file():
        head = EagleHead.load(out, embed, lm_head, cfg.num_hidden_layers)
    else:
        head, start_state, manifest = start_from_shipped(args.model, embed, lm_head, cfg.num_hidden_layers)
        origin = f"shipped head {manifest['name']} (sha256 {manifest['sha256'][:12]})"
    answers = Path(args.answers)
    vocab_report = {}
    if args.resize_draft_vocab is not None:
        head, vocab_report = resized(head, answers, args.resize_draft_vocab, origin, args.held_out)
    layers = tuple(head.config.target_layer_ids)
    if args.layers and tuple(int(x) for x in args.layers.split(",")) != layers:
        raise ConfigError(f"--layers {args.layers}: the head being trained reads layers {list(layers)}")
    features = build_feature_shards(
        model, answers, answers / "features", layers, args.seq_len, limit=args.feature_shards
    )
    used = [s for s in features["shards"][: args.feature_shards] if s["file"]]  # shards with answers to train on
    paths = [answers / "features" / s["file"] for s in used]
    # Held-out features always come from the fp32 target: offline tau is the fp32 acceptance figure.
    fp32_model = model if args.dtype == "float32" else load_model(args.model, "float32")[0]
    held = held_out_features(fp32_model, Path(args.held_out), layers, HELD_OUT_SEQ_LEN) if args.held_out else {}
    machine = machine_info()["cpu"]

    def evaluate(h: EagleHead) -> dict:
        row = {name: round(offline_chain_tau(h, data, EVAL_DEPTH)["tau"], 4) for name, data in held.items()}
        return {**row, "machine": machine, "threads": torch.get_num_threads()}

    w_draft = lm_head.float() if head.lm_head is None else lm_head.float()[head.d2t]
    train_cfg = TrainConfig(
        steps=args.ttt_steps,
        lr=args.lr,
        max_tokens=args.max_tokens,
        max_minutes=args.max_minutes,
        checkpoint_minutes=args.checkpoint_minutes,
        seed=args.seed,
        warmup_steps=args.warmup_steps,
        schedule=args.schedule,
        schedule_tokens=args.schedule_tokens,
        batch_tokens=args.batch_tokens,
        compute_dtype=args.train_dtype,
    )
    head = head.float()
    if start_state is not None and held:  # the starting point, for the history
        start_state.evals.append({"tokens_seen": start_state.tokens_seen, "step": start_state.step, **evaluate(head)})
    state = train_eagle_head(
        head, ShardSet(paths), w_draft, out, train_cfg, start_state=start_state, evaluate=evaluate if held else None
    )
    summary = {
        "out": str(out),
        "started_from": origin,
        "feature_shards": len(paths),
        "positions": sum(s["positions"] for s in used),
        "steps": state.step,
        "tokens_seen": state.tokens_seen,
        "minutes": round(state.seconds / 60, 2),
        "evals": state.evals[-3:],
        **vocab_report,
    }
    print(json.dumps(summary))
    return 0
