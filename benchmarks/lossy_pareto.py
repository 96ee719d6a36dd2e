"""Speed/quality of lossy acceptance on a checkable task's held-out test split: task accuracy and
tokens per verify for lossless verification, typical acceptance, the KL judge and a learned judge
across thresholds, with the same drafter and tree policy. Writes JSON, a markdown table and a
Pareto plot (accuracy against tokens per verify). Run it in the package's environment after
`sagespec mine-judge` and `sagespec train-judge`:

    .venv/bin/python benchmarks/lossy_pareto.py --judge judge.json --num-prompts 100
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from tqdm import tqdm

from sagespec.common.judge_tasks import TASKS
from sagespec.common.sampling import SamplingParams
from sagespec.common.verify import load_judge
from sagespec.plugins.transformers.factory import load_target, make_drafter, make_generator, make_policy_from_args

TYPICAL_EPS = (0.3, 0.1, 0.03, 0.01)
KL_THRESHOLDS = (0.5, 1.0, 2.0, 4.0)


def configs(
    judge_path: str | None, typical_eps=TYPICAL_EPS, kl_thresholds=KL_THRESHOLDS, judge_points: list[str] | None = None
) -> list[tuple[str, dict]]:
    out = [("auto", {})]
    out += [("typical", {"eps": e, "delta": 1.0}) for e in typical_eps]
    out += [("kl-judge", {"threshold": t}) for t in kl_thresholds]
    if judge_path:
        known = sorted(load_judge(judge_path).thresholds)
        points = judge_points or known
        unknown = sorted(set(points) - set(known))
        if unknown:
            raise SystemExit(f"--judge-points {unknown}: the judge's operating points are {known}")
        out += [("judge", {"path": judge_path, "threshold": name}) for name in points]
    return out


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def label(rule: str, options: dict) -> str:
    if rule == "auto":
        return "lossless"
    shown = {k: v for k, v in options.items() if k != "path"}
    return rule + " " + " ".join(f"{k}={v}" for k, v in shown.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    ap.add_argument("--task", default="arithmetic", choices=sorted(TASKS))
    ap.add_argument("--judge", help="a judge file from `sagespec train-judge` (its operating points are swept)")
    ap.add_argument("--eagle-head", help="head folder (default: the shipped one)")
    ap.add_argument("--policy", default="chain")
    ap.add_argument("--budget", type=int, default=5)
    ap.add_argument("--num-prompts", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--typical-eps", type=floats, default=list(TYPICAL_EPS), help="comma-separated")
    ap.add_argument("--kl-thresholds", type=floats, default=list(KL_THRESHOLDS), help="comma-separated, nats")
    ap.add_argument("--judge-points", default=None, help="comma-separated operating points (default: all)")
    ap.add_argument("--out", default="benchmarks/results/lossy_pareto.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    task = TASKS[args.task]
    items = task.items("test")[: args.num_prompts]
    target = load_target(args.model, args.dtype)
    drafter = make_drafter("eagle", target, eagle_head=args.eagle_head, dtype=args.dtype)
    prompts = [target.encode_chat(it.question) for it in items]
    rows = []
    points = args.judge_points.split(",") if args.judge_points else None
    for rule, options in configs(args.judge, args.typical_eps, args.kl_thresholds, points):
        gen = make_generator(target, drafter, make_policy_from_args(args.policy, args.budget), rule, options)
        hits, taus, emitted, verifies = 0, [], 0, 0
        for item, ids in zip(items, tqdm(prompts, desc=label(rule, options), unit="prompt")):
            r = gen.generate(ids, args.max_new_tokens, SamplingParams())
            hits += task.correct(item, target.tokenizer.decode(r.tokens, skip_special_tokens=True))
            steps = r.accepted_per_step[1:]
            emitted, verifies = emitted + sum(steps), verifies + len(steps)
            if steps:
                taus.append(sum(steps) / len(steps))
        rows.append(
            {
                "rule": rule,
                "options": {k: v for k, v in options.items() if k != "path"},
                "label": label(rule, options),
                "accuracy": hits / len(items),
                "tokens_per_verify": emitted / max(1, verifies),
                "median_prompt_tau": statistics.median(taus) if taus else None,
            }
        )
    base = rows[0]
    for r in rows:
        r["accuracy_drop_points"] = 100 * (base["accuracy"] - r["accuracy"])
        r["tau_vs_lossless"] = r["tokens_per_verify"] / base["tokens_per_verify"]
    result = {
        "task": args.task,
        "split": "test",
        "num_prompts": len(items),
        "max_new_tokens": args.max_new_tokens,
        "model": args.model,
        "dtype": args.dtype,
        "policy": args.policy,
        "budget": args.budget,
        "eagle_head": args.eagle_head or "shipped",
        "judge": args.judge,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    table = ["| acceptance | accuracy | drop (points) | tokens/verify | vs lossless |", "|---|---|---|---|---|"]
    table += [
        f"| {r['label']} | {r['accuracy']:.3f} | {r['accuracy_drop_points']:+.1f} | "
        f"{r['tokens_per_verify']:.2f} | {r['tau_vs_lossless']:.2f}x |"
        for r in rows
    ]
    out.with_suffix(".md").write_text("\n".join(table) + "\n")
    plot(result, out.with_suffix(".png"))
    print("\n".join(table))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for rule, marker in (("auto", "*"), ("typical", "o"), ("kl-judge", "s"), ("judge", "^")):
        pts = [r for r in result["rows"] if r["rule"] == rule]
        if pts:
            ax.plot(
                [r["tokens_per_verify"] for r in pts],
                [100 * r["accuracy"] for r in pts],
                marker=marker,
                linestyle="-" if len(pts) > 1 else "",
                label="lossless" if rule == "auto" else rule,
            )
    base = result["rows"][0]
    ax.axhline(100 * base["accuracy"] - 1, color="grey", linestyle=":", label="1 point below lossless")
    ax.axvline(1.5 * base["tokens_per_verify"], color="grey", linestyle="--", label="1.5x lossless tokens/verify")
    ax.set_xlabel("tokens per verify (bonus included)")
    ax.set_ylabel(f"{result['task']} test accuracy (%)")
    ax.set_title(
        f"lossy acceptance: {result['model']}, eagle {result['policy']} {result['budget']}, "
        f"{result['num_prompts']} prompts"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
