"""Tau of the shipped EAGLE head for each tree policy at equal node budgets, greedy and sampled,
on MT-Bench and HumanEval, with wall clock against plain decoding from the same runs.

Each (dataset, temperature) cell is one `sagespec bench` run (plain decoding plus every
policy x budget, back to back per prompt). Writes the merged JSON, a markdown table and a plot
of tau against budget. Run it in the package's environment:

    .venv/bin/python benchmarks/eagle_tau_matrix.py --num-prompts 8 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

POLICIES = ("chain", "static", "dynamic", "sage")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", default="8,16,32")
    ap.add_argument("--datasets", default="mt-bench,humaneval")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    ap.add_argument("--eagle-head", help="head folder (default: the shipped SmolLM2 head)")
    ap.add_argument("--out", default="benchmarks/results/eagle_tau_matrix.json")
    args = ap.parse_args()
    try:
        budgets = [int(b) for b in args.budgets.split(",")]
        temps = [float(t) for t in args.temperatures.split(",")]
    except ValueError:
        ap.error("--budgets must be integers and --temperatures numbers, comma-separated")
    configs = [f"eagle:{p}:{b}" for b in budgets for p in POLICIES]
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets.split(","):
            for t in temps:
                part = Path(tmp) / f"{dataset}-{t}.json"
                cmd = [
                    sys.executable,
                    "-m",
                    "sagespec.plugins.transformers.cli.main",
                    "bench",
                    "--dataset",
                    dataset,
                    "--num-prompts",
                    str(args.num_prompts),
                    "--max-new-tokens",
                    str(args.max_new_tokens),
                    "--temperature",
                    str(t),
                    "--dtype",
                    args.dtype,
                    "--threads",
                    "2",
                    "--out",
                    str(part),
                    "--plot",
                    str(part.with_suffix(".png")),
                    *configs,
                ]
                if args.eagle_head:
                    cmd += ["--eagle-head", args.eagle_head]
                print(f"== {dataset}, temperature {t}", flush=True)
                subprocess.run(cmd, check=True)
                summary = json.loads(part.read_text())["summary"]
                for label, s in summary.items():
                    if label == "plain":
                        continue
                    _, policy, budget = label.split(":")
                    cells.append(
                        {
                            "dataset": dataset,
                            "temperature": t,
                            "policy": policy,
                            "budget": int(budget),
                            "tau": s["tau"],
                            "speedup_vs_plain": s["median_speedup"],
                            "tok_per_s": s["tok_per_s"],
                            "plain_tok_per_s": summary["plain"]["tok_per_s"],
                            "identical_to_plain": s["identical_to_plain"] if t == 0 else None,
                        }
                    )
    meta = {
        "model": "SmolLM2-135M-Instruct",
        "drafter": args.eagle_head or "shipped EAGLE head",
        "num_prompts": args.num_prompts,
        "max_new_tokens": args.max_new_tokens,
        "dtype": args.dtype,
        "budgets": budgets,
        "temperatures": temps,
        "datasets": args.datasets.split(","),
        "speedup": "median over prompts of plain seconds / config seconds, same process",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "cells": cells}, indent=1) + "\n")
    print(table(cells, budgets))
    plot(cells, meta, out.with_suffix(".png"))


def table(cells: list[dict], budgets: list[int]) -> str:
    """One row per (dataset, temperature, policy); per budget 'tau (speedup)'."""
    head = "| dataset | T | policy | " + " | ".join(f"budget {b}" for b in budgets) + " |"
    lines = [head, "|" + "---|" * (3 + len(budgets))]
    keys = dict.fromkeys((c["dataset"], c["temperature"], c["policy"]) for c in cells)
    for d, t, p in keys:
        by_b = {c["budget"]: c for c in cells if (c["dataset"], c["temperature"], c["policy"]) == (d, t, p)}
        vals = [f"{by_b[b]['tau']:.2f} ({by_b[b]['speedup_vs_plain']:.2f}x)" if b in by_b else "-" for b in budgets]
        lines.append(f"| {d} | {t:g} | {p} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def plot(cells: list[dict], meta: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((c["dataset"], c["temperature"]) for c in cells))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.6), sharey=True, squeeze=False)
    for ax, (d, t) in zip(axes[0], panels):
        for policy in POLICIES:
            pts = sorted(
                (c["budget"], c["tau"])
                for c in cells
                if (c["dataset"], c["temperature"], c["policy"]) == (d, t, policy)
            )
            ax.plot([b for b, _ in pts], [v for _, v in pts], marker="o", label=policy)
        ax.set_xscale("log", base=2)
        ax.set_xticks(meta["budgets"], [str(b) for b in meta["budgets"]])
        ax.set_title(f"{d}, T={t:g}", fontsize=10)
        ax.set_xlabel("node budget")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("tau (tokens per verify)")
    axes[0][0].legend()
    fig.suptitle(
        f"{meta['model']}, {meta['drafter']}, {meta['num_prompts']} prompts x {meta['max_new_tokens']}, "
        f"{meta['dtype']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
