"""sage in vLLM at two revisions of this package, side by side: the working tree against a git
revision, in mirrored rounds (A B, B A) on the same prompts, with vLLM's own methods beside them.

The baseline revision is checked out into a temporary worktree and put first on PYTHONPATH for its
runs, so the same vLLM environment imports either tree's `sagespec`. Each run is one
`vllm_speed.py --one` process (fresh engine, compiled defaults unless --modes says eager). Per
config and revision: the median over rounds of tok/s; at batch 1 also the paired per-prompt ratio
against plain of the same round. Writes JSON and a PNG. Run it in the vLLM environment, e.g.:

    .venv-vllm/bin/python benchmarks/vllm_ab.py --baseline HEAD~1 --batch 4 --rounds 2 \\
        --configs plain,vllm-ngram,sage-ngram-auto --out benchmarks/results/vllm_ab.json

Engine configurations (plain, vllm-*) run once per round at the working tree: the plugin is
installed in their processes too, but only sage's proposer acts on what it patches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_speed import CONFIGS, SECTIONS

from sagespec.common.machine import machine_info

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"common": "common", "kernels": "kernels", "plugins": "plugins"}  # pyproject's package-dir


def baseline_tree(revision: str, into: Path) -> Path:
    """A `sagespec` package folder built from `revision`: a worktree, then links named as the
    namespace maps them. Returns the folder to put on PYTHONPATH."""
    worktree = into / "worktree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), revision], check=True)
    package = into / "path" / "sagespec"
    package.mkdir(parents=True)
    for name, folder in PACKAGE_DIRS.items():
        (package / name).symlink_to(worktree / folder)
    return package.parent


def one_run(name: str, path: Path | None, args, batch: int, out: Path) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "vllm_speed.py"), "--one", name, "--out", str(out)]
    for flag in ("model", "dataset", "workload", "num_prompts", "max_tokens", "dtype", "modes"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    cmd += ["--batch", str(batch)]
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())


def summarise(runs: list[dict], plain: list[dict], batch: int) -> dict:
    """Medians over rounds; batch 1: paired per-prompt ratios against the same round's plain run."""
    row = {
        "tok_per_s": statistics.median(r["tok_per_s"] for r in runs),
        "tok_per_s_rounds": [r["tok_per_s"] for r in runs],
        "tau": statistics.median(r["tau"] for r in runs),
    }
    if plain:
        if batch == 1:
            ratios = [
                a / b for r, p in zip(runs, plain) for a, b in zip(r["per_prompt_tok_per_s"], p["per_prompt_tok_per_s"])
            ]
            row["vs_plain"] = statistics.median(ratios)
        else:
            row["vs_plain"] = statistics.median(r["tok_per_s"] / p["tok_per_s"] for r, p in zip(runs, plain))
        row["same_as_plain"] = sum(a == b for a, b in zip(runs[0]["outputs"], plain[0]["outputs"]))
        row["requests"] = len(plain[0]["outputs"])
    steps = [r["step_seconds"] for r in runs if r.get("step_seconds")]
    if steps:
        row["step_ms"] = {k: statistics.median(s[k] for s in steps) * 1e3 for k in (*SECTIONS, "engine_and_other")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="git revision to compare the working tree against")
    ap.add_argument("--configs", default="plain,vllm-ngram,sage-ngram-auto,sage-suffix-auto")
    ap.add_argument("--rounds", type=int, default=2, help="mirrored rounds (even: each order equally often)")
    ap.add_argument("--batch", default="1,4")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--workload", default="two-turn", choices=["first-turn", "two-turn"])
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--modes", default="compiled", choices=["compiled", "eager"])
    ap.add_argument("--out", default="benchmarks/results/vllm_ab.json")
    args = ap.parse_args()
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"--configs: {unknown} are not configurations of vllm_speed.py; allowed: {list(CONFIGS)}")
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        ap.error(f"--batch: {args.batch!r} is not a comma-separated list of integers")
    revision = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.baseline], capture_output=True, text=True, check=False
    )
    if revision.returncode:
        ap.error(f"--baseline: {args.baseline!r} is not a git revision of this checkout")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    runs: dict[tuple[int, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base_path = baseline_tree(revision.stdout.strip(), Path(tmp))
        try:
            order = [(n, "working tree") for n in names] + [(n, "baseline") for n in names if n.startswith("sage")]
            plan = [
                (batch, r, entry)
                for batch in batches
                for r in range(args.rounds)
                for entry in (order if r % 2 == 0 else order[::-1])
            ]
            for i, (batch, _round, (name, variant)) in enumerate(tqdm(plan, desc="runs", unit="run")):
                path = base_path if variant == "baseline" else None
                out = Path(tmp) / f"run{i}.json"
                runs.setdefault((batch, name, variant), []).append(one_run(name, path, args, batch, out))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "worktree")])
    rows = []
    for (batch, name, variant), results in runs.items():
        plain = runs.get((batch, "plain", "working tree"), [])
        rows.append({"config": name, "variant": variant, "batch": batch, **summarise(results, plain, batch)})
    meta = {
        **vars(args),
        "baseline_commit": revision.stdout.strip(),
        "working_tree_head": head,
        "machine": machine_info(),
        "vs_plain": "batch 1: median of per-prompt ratios, all rounds; batch > 1: median over rounds of throughput ratios",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    for row in rows:
        steps = row.get("step_ms")
        own = "/".join(f"{steps[k]:.1f}" for k in SECTIONS) if steps else "-"
        print(
            f"b{row['batch']} {row['config']:>18} {row['variant']:>12}: {row['tok_per_s']:6.1f} tok/s, "
            f"tau {row['tau']:.2f}, vs plain {row.get('vs_plain', float('nan')):.2f}x, sage ms/step {own}"
        )
    plot(rows, out.with_suffix(".png"), meta)


def plot(rows: list[dict], path: Path, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 0.5 * len(rows) + 2), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        mine = [r for r in rows if r["batch"] == batch]
        labels = [f"{r['config']} ({r['variant']})" for r in mine]
        colors = ["tab:grey" if r["variant"] == "baseline" else "tab:blue" for r in mine]
        ax.barh(range(len(mine)), [r.get("vs_plain", 0) for r in mine], color=colors)
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(range(len(mine)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("speed vs plain vLLM (median over rounds)")
        ax.set_title(f"batch {batch}")
    fig.suptitle(
        f"sage at {meta['baseline_commit'][:8]} (grey) and the working tree (blue); vLLM CPU, {meta['dtype']}, "
        f"{meta['modes']}, {meta['num_prompts']} {meta['dataset']} ({meta['workload']}) x {meta['max_tokens']}, "
        f"{meta['rounds']} mirrored rounds"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
