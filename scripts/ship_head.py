"""Copy a trained head into common/assets as bf16 with a manifest (sha256, data, tokens, steps,
measured acceptance).

    .venv/bin/python scripts/ship_head.py --head DIR --name smollm2-eagle3 --acceptance FILE.json \\
        --data "ShareGPT, 1200 conversations x 256 tokens" [--answers .train/answers]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import torch

from sagespec.common.drafters import EagleHead
from sagespec.common.shipped import TARGET_FIELDS
from sagespec.plugins.transformers.model_loading import load_model

ASSETS = Path(__file__).resolve().parents[1] / "common" / "assets"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--head", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--acceptance", nargs="*", default=[], help="JSON files from benchmarks/drafter_acceptance.py")
    p.add_argument("--data", required=True, help="what the head was trained on")
    p.add_argument(
        "--answers",
        help="the training answers folder (make_training_answers.py): records where the next session's prompts start",
    )
    args = p.parse_args()
    model, _ = load_model(args.model, "float32")
    head = EagleHead.load(
        args.head,
        model.get_input_embeddings().weight,
        model.get_output_embeddings().weight,
        model.config.num_hidden_layers,
    )
    out = ASSETS / args.name
    before = json.loads((out / "MANIFEST.json").read_text()) if (out / "MANIFEST.json").is_file() else {}
    log = json.loads((Path(args.head) / "training_log.json").read_text())
    head.to(torch.bfloat16).save(out)
    history = log["history"]
    stride = max(1, len(history) // 40)
    manifest = {
        "name": args.name,
        "target": args.model,
        "target_config": {name: getattr(model.config, name) for name in TARGET_FIELDS},
        "sha256": hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(),
        "bytes": (out / "model.safetensors").stat().st_size,
        "data": args.data,
        "tokens_seen": log["tokens_seen"],
        "optimizer_steps": log["step"],
        "training_minutes": round(log["seconds"] / 60, 1),
        # Earlier shipped curves first: a head resumed from a shipped one logs only its own steps.
        "curve": [c for c in before.get("curve", []) if not history or c["tokens"] < history[0][0]]
        + [{"tokens": t, "loss": round(loss, 4), "step0_agreement": round(a, 4)} for t, loss, a in history[::stride]],
        "acceptance": [json.loads(Path(f).read_text()) for f in args.acceptance],
        # Every shipped head's held-out measurements, oldest first: what each session's training
        # added (tokens seen, minutes, loss, offline tau on MT-Bench and HumanEval, machine).
        "history": merged_history(before.get("history", []), log.get("evals", []), args.data),
    }
    # The corpus index the next session's answers start from (make_training_answers.py --start).
    next_prompt = before.get("next_training_prompt", 0)
    if args.answers:
        answered = json.loads((Path(args.answers) / "manifest.json").read_text())
        next_prompt = max(next_prompt, answered.get("next_training_prompt", 0))
    if next_prompt:
        manifest["next_training_prompt"] = next_prompt
    if before.get("data") and before["data"] != args.data:
        manifest["data"] = f"{before['data']} Then: {args.data}"
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"shipped {out} ({manifest['bytes'] / 1e6:.1f} MB)")


def merged_history(before: list[dict], evals: list[dict], data: str) -> list[dict]:
    """The earlier manifest's history plus this run's checkpoint evaluations past its last tokens."""
    last = max((row["tokens_seen"] for row in before), default=-1)
    return before + [{**row, "data": data} for row in evals if row["tokens_seen"] > last]


if __name__ == "__main__":
    main()
