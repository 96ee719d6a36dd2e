"""Plain KD against AdaSPEC for the EAGLE head, on the same data and token budget.

Two heads start from the same seed; one trains on every token (plain KD), the other only on the
top fraction of tokens by the KL gap to a reference head trained before on all tokens (AdaSPEC;
the reference is the shipped SmolLM2 head unless --reference is given). After each stage of
training tokens both are measured the same way (greedy chain, `drafter_acceptance.py`), which also
gives tau against training tokens. Writes JSON and a plot. Run it in the package's environment:

    .venv/bin/python benchmarks/adaspec_ablation.py --stages 50000,100000,200000 --num-prompts 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sagespec(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "sagespec.plugins.transformers.cli.main", *args], check=True)


def acceptance(head: Path, args, out: Path) -> dict:
    subprocess.run(
        [
            sys.executable,
            str(HERE / "drafter_acceptance.py"),
            "--drafter",
            "eagle",
            "--eagle-head",
            str(head),
            "--policy",
            "chain",
            "--budget",
            str(args.depth),
            "--num-prompts",
            str(args.num_prompts),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--out",
            str(out),
        ],
        check=True,
    )
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default="50000,100000,200000", help="cumulative training tokens to measure at")
    ap.add_argument("--reference", help="AdaSPEC reference head (default: the shipped SmolLM2 head)")
    ap.add_argument("--adaspec-top", type=float, default=0.4)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--depth", type=int, default=5, help="chain depth of the acceptance measurement")
    ap.add_argument("--work", default="adaspec_ablation", help="folder for the two heads (resumable)")
    ap.add_argument("--out", default="benchmarks/results/adaspec_ablation.json")
    args = ap.parse_args()
    try:
        stages = sorted(int(s) for s in args.stages.split(","))
    except ValueError:
        ap.error(f"--stages: {args.stages!r} is not a comma-separated list of integers")
    if not stages or stages[0] < 1 or not 0 < args.adaspec_top <= 1:
        ap.error("--stages must be positive and --adaspec-top in (0, 1]")
    from sagespec.common.shipped import shipped_head

    reference = Path(args.reference) if args.reference else shipped_head("smollm2")
    manifest = reference / "MANIFEST.json"
    reference_tokens = json.loads(manifest.read_text())["tokens_seen"] if manifest.is_file() else None
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    work = Path(args.work)
    # The shipped head's data recipe (features come from the same cache).
    recipe = [
        "--model",
        "smollm2",
        "--conversations",
        "1200",
        "--seq-len",
        "256",
        "--draft-vocab",
        "6144",
        "--ttt-steps",
        "4",
        "--lr",
        "1e-3",
        "--batch-size",
        "4",
        "--seed",
        "0",
        "--threads",
        "2",
        "--checkpoint-minutes",
        "1000",
    ]
    variants = {"kd": [], "adaspec": ["--adaspec-reference", str(reference), "--adaspec-top", str(args.adaspec_top)]}
    curve = {name: [] for name in variants}
    for stage in stages:
        for name, extra in variants.items():
            print(f"== {name}: training to {stage} tokens", flush=True)
            sagespec("train-drafter", "--out", str(work / name), "--max-tokens", str(stage), *recipe, *extra)
            log = json.loads((work / name / "training_log.json").read_text())
            r = acceptance(work / name, args, work / f"{name}-{stage}.json")
            curve[name].append(
                {
                    "tokens": log["tokens_seen"],
                    "minutes": round(log["seconds"] / 60, 2),
                    "tau": r["tau"],
                    "median_prompt_tau": r["median_prompt_tau"],
                }
            )
            print(f"   {name} at {log['tokens_seen']} tokens: tau {r['tau']:.3f}", flush=True)
    ref = acceptance(reference, args, work / "reference.json")
    result = {
        "meta": {
            "dataset": "mt-bench",
            "num_prompts": args.num_prompts,
            "max_new_tokens": args.max_new_tokens,
            "chain_depth": args.depth,
            "dtype": "float32",
            "greedy": True,
            "adaspec_top": args.adaspec_top,
            "reference": str(reference.name),
            "reference_tokens": reference_tokens,
            "recipe": " ".join(recipe),
        },
        "curve": curve,
        "reference": {"tokens": reference_tokens, "tau": ref["tau"]},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    plot(result, out.with_suffix(".png"))


def table(result: dict) -> str:
    lines = ["| training tokens | tau plain KD | tau AdaSPEC |", "|---|---|---|"]
    for kd, ada in zip(result["curve"]["kd"], result["curve"]["adaspec"]):
        lines.append(f"| {kd['tokens']:,} | {kd['tau']:.3f} | {ada['tau']:.3f} |")
    ref = result["reference"]
    lines.append(f"| reference (plain KD), {ref['tokens'] or '?':,} | {ref['tau']:.3f} | |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, label in (("kd", "plain KD"), ("adaspec", f"AdaSPEC (top {result['meta']['adaspec_top']:.0%})")):
        pts = result["curve"][name]
        ax.plot([p["tokens"] for p in pts], [p["tau"] for p in pts], marker="o", label=label)
    ref = result["reference"]
    if ref["tokens"]:
        ax.scatter([ref["tokens"]], [ref["tau"]], marker="*", s=120, color="k", label="reference (shipped, plain KD)")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel(f"tau, greedy chain depth {result['meta']['chain_depth']}")
    m = result["meta"]
    ax.set_title(f"EAGLE head for SmolLM2-135M: {m['num_prompts']} MT-Bench x {m['max_new_tokens']}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
