"""`sagespec mine-judge` and `sagespec train-judge`: AutoJudge labels mined on a checkable task
with the target and a drafter, then the judge file trained from them."""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from sagespec.common.judge_tasks import SPLITS, TASKS
from sagespec.common.params import ConfigError
from sagespec.common.training.judge_mining import mine_prompt

META = "meta.json"


def add_mine_arguments(p) -> None:
    p.add_argument("--model", default="smollm2")
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    p.add_argument("--task", default="arithmetic", choices=sorted(TASKS))
    p.add_argument("--splits", default="train,validation,test", help=f"comma-separated, from {list(SPLITS)}")
    p.add_argument("--drafter", default="eagle", choices=["eagle", "draft_model"])
    p.add_argument("--eagle-head", help="head folder (default: the one shipped for the model)")
    p.add_argument("--draft-model", help="Hugging Face folder of a draft model sharing the target's tokenizer")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--limit", type=int, default=None, help="at most this many prompts per split")
    p.add_argument("--out", required=True, help="folder of mined-<split>.jsonl files (resumed when present)")
    p.add_argument("--threads", type=int, default=None)


def add_train_arguments(p) -> None:
    p.add_argument("--mined", required=True, help="a folder written by `sagespec mine-judge`")
    p.add_argument("--out", required=True, help="the judge file to write (JSON)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)


def _splits(text: str) -> list[str]:
    splits = [s for s in text.split(",") if s]
    bad = [s for s in splits if s not in SPLITS]
    if bad or not splits:
        raise ConfigError(f"--splits {text!r}: allowed names are {list(SPLITS)}")
    return splits


def _mining_target(args):
    from sagespec.plugins.transformers.factory import load_target
    from sagespec.plugins.transformers.mining_target import MiningTarget
    from sagespec.plugins.transformers.model_loading import load_model

    target = load_target(args.model, args.dtype)
    if target.tokenizer is None:
        raise ConfigError(f"--model {args.model}: mining needs a tokenizer (the task is text)")
    if args.drafter == "draft_model":
        if not args.draft_model:
            raise ConfigError("--drafter draft_model needs --draft-model PATH")
        return target, MiningTarget(
            target.model, target.tokenizer, target.eos_ids(), draft_model=load_model(args.draft_model, args.dtype)[0]
        )
    from sagespec.common.drafters import EagleHead
    from sagespec.common.shipped import shipped_head

    path = args.eagle_head or shipped_head(target.name)
    if not path:
        raise ConfigError(f"--drafter eagle: no head ships for --model {args.model}; give --eagle-head DIR")
    m = target.model
    head = (
        EagleHead.load(
            path, m.get_input_embeddings().weight, m.get_output_embeddings().weight, m.config.num_hidden_layers
        )
        .float()
        .eval()
    )
    return target, MiningTarget(m, target.tokenizer, target.eos_ids(), head=head)


def run_mine(args) -> int:
    if args.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens {args.max_new_tokens} must be >= 1")
    splits = _splits(args.splits)
    out = Path(args.out)
    meta = {
        "model": args.model,
        "dtype": args.dtype,
        "task": args.task,
        "drafter": args.drafter,
        "eagle_head": args.eagle_head,
        "draft_model": args.draft_model,
        "max_new_tokens": args.max_new_tokens,
    }
    if (out / META).is_file():
        before = json.loads((out / META).read_text())
        if before != meta:
            diff = sorted(k for k in meta if before.get(k) != meta[k])
            raise ConfigError(f"--out {args.out} was mined with other settings ({diff}); use another folder")
    out.mkdir(parents=True, exist_ok=True)
    (out / META).write_text(json.dumps(meta, indent=1))
    target, miner = _mining_target(args)
    task = TASKS[args.task]
    for split in splits:
        items = task.items(split)[: args.limit]
        path = mined_path(out, split)
        done = {row["id"] for row in mined_rows(out, split)}
        todo = [it for it in items if it.id not in done]
        bar = tqdm(todo, desc=f"mine-judge {split}", unit="prompt", initial=len(done), total=len(items))
        with path.open("a") as f:
            for item in bar:
                prompt = target.encode_chat(item.question)
                response = miner.regenerate(prompt, args.max_new_tokens)
                mined = mine_prompt(
                    prompt,
                    response,
                    miner.draft_all,
                    miner.regenerate,
                    miner.hidden_at,
                    lambda r, item=item: task.correct(item, miner.text(r)),
                    args.max_new_tokens,
                    settled=lambda r: task.settled(miner.text(r)),
                )
                f.write(
                    json.dumps(
                        {
                            "id": item.id,
                            "correct": mined.correct,
                            "response": miner.text(mined.response),
                            "final": miner.text(mined.final),
                            "mismatches": [
                                {
                                    "position": m.position,
                                    "target_token": m.target_token,
                                    "draft_token": m.draft_token,
                                    "important": m.important,
                                    "hidden": [round(v, 6) for v in m.hidden.tolist()],
                                }
                                for m in mined.mismatches
                            ],
                        }
                    )
                    + "\n"
                )
                f.flush()
                bar.set_postfix(mismatches=len(mined.mismatches), important=sum(m.important for m in mined.mismatches))
    print(json.dumps(summarise_mined(out)))
    return 0


def mined_path(folder: Path, split: str) -> Path:
    return folder / f"mined-{split}.jsonl"


def mined_rows(folder: Path, split: str) -> list[dict]:
    """One dict per mined prompt; none when the split was not mined."""
    path = mined_path(folder, split)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def read_split(folder: Path, split: str):
    if not mined_path(folder, split).is_file():
        raise ConfigError(f"{mined_path(folder, split)} is missing: run `sagespec mine-judge --splits {split}` first")
    ms = [m for row in mined_rows(folder, split) for m in row["mismatches"]]
    return [m["hidden"] for m in ms], [int(m["important"]) for m in ms]


def summarise_mined(folder: Path) -> dict:
    out = {}
    for split in SPLITS:
        if mined_path(folder, split).is_file():
            rows = mined_rows(folder, split)
            ms = [m for r in rows for m in r["mismatches"]]
            out[split] = {
                "prompts": len(rows),
                "target_correct": sum(r["correct"] for r in rows),
                "mismatches": len(ms),
                "important": sum(m["important"] for m in ms),
            }
    return out


def run_train(args) -> int:
    from sagespec.common.training.judge_trainer import train_judge

    folder = Path(args.mined)
    if not (folder / META).is_file():
        raise ConfigError(f"--mined {args.mined}: not a folder written by `sagespec mine-judge` (no {META})")
    meta = json.loads((folder / META).read_text())
    x_train, y_train = read_split(folder, "train")
    x_val, y_val = read_split(folder, "validation")
    judge = train_judge(
        x_train, y_train, x_val, y_val, seed=args.seed, provenance={**meta, "mined": summarise_mined(folder)}
    )
    judge.save(args.out)
    p = judge.provenance
    print(
        json.dumps(
            {
                "out": args.out,
                "C": p["C"],
                "validation_roc_auc": round(p["validation_roc_auc"], 4),
                "thresholds": judge.thresholds,
            }
        )
    )
    return 0
