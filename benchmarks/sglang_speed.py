"""sage inside SGLang's engine against SGLang without speculation: same model, same prompts, one
run, greedy, batch 1 (each prompt alone, timed). Reports tokens/s, tau (tokens per verify, bonus
included) and ratios to plain SGLang as medians of paired per-prompt ratios, and checks the outputs
are identical. Writes JSON, a markdown table and a bar chart.

What runs: SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1, torch_native attention, fp32) with the
test-only sgl_kernel stand-in (integration_tests/sglang/sgl_kernel_stand_in.py) in its processes,
since PyPI's sgl_kernel is CUDA-only. SGLang's own NGRAM and EAGLE workers cannot run on that engine
(they call sgl_kernel ops), so they are not in the table. Run it in .venv-sglang:

    .venv-sglang/bin/python benchmarks/sglang_speed.py --num-prompts 8 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANE = ROOT / "integration_tests" / "sglang"
CONFIGS = {
    "plain": {},
    "sage ngram, SAGE trees, 9 tokens": {"speculative_algorithm": "sage", "speculative_num_draft_tokens": 9},
    "sage ngram, chain 4": {
        "speculative_algorithm": "sage",
        "speculative_num_draft_tokens": 5,
        "speculative_adaptive_config": json.dumps({"policy": "chain"}),
    },
    "sage eagle, SAGE trees, 9 tokens": {
        "speculative_algorithm": "sage",
        "speculative_num_draft_tokens": 9,
        "speculative_adaptive_config": json.dumps({"drafter": "eagle"}),
    },
    "sage eagle, chain 4": {
        "speculative_algorithm": "sage",
        "speculative_num_draft_tokens": 5,
        "speculative_adaptive_config": json.dumps({"drafter": "eagle", "policy": "chain"}),
    },
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default="benchmarks/results/sglang_speed.json")
    args = ap.parse_args()
    from sagespec.plugins.transformers.data.chat_prompts import chat_prompt_ids
    from sagespec.plugins.transformers.model_loading import smollm2_folder

    folder = str(smollm2_folder())
    spec = {
        "model": folder,
        "prompts": chat_prompt_ids(folder, args.num_prompts),
        "max_new_tokens": args.max_tokens,
        "configs": CONFIGS,
        "one_at_a_time": True,
    }
    env = {
        **os.environ,
        "SGLANG_USE_CPU_ENGINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
        "PYTHONPATH": str(LANE / "stand_in_site"),
    }
    done = subprocess.run(
        [sys.executable, str(LANE / "engine_runs.py"), json.dumps(spec)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    plain = runs["plain"]
    rows = []
    for name, run in runs.items():
        tps = [len(t) / s for t, s in zip(run["tokens"], run["seconds"])]
        plain_tps = [len(t) / s for t, s in zip(plain["tokens"], plain["seconds"])]
        taus = [m["completion_tokens"] / m["spec_verify_ct"] for m in run["meta"] if m["spec_verify_ct"]]
        rows.append(
            {
                "config": name,
                "tokens_per_s": statistics.median(tps),
                "vs_plain": statistics.median(a / b for a, b in zip(tps, plain_tps)),
                "tau": statistics.median(taus) if taus else 1.0,
                "identical_to_plain": run["tokens"] == plain["tokens"],
            }
        )
    result = {
        "model": "SmolLM2-135M-Instruct",
        "dtype": "float32",
        "engine": "SGLang CPU engine, torch_native",
        "num_prompts": args.num_prompts,
        "max_tokens": args.max_tokens,
        "batch": 1,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    table = ["| config | tok/s | tau | vs plain | identical |", "|---|---|---|---|---|"]
    table += [
        f"| {r['config']} | {r['tokens_per_s']:.1f} | {r['tau']:.2f} | {r['vs_plain']:.2f}x | "
        f"{'yes' if r['identical_to_plain'] else 'NO'} |"
        for r in rows
    ]
    out.with_suffix(".md").write_text("\n".join(table) + "\n")
    plot(result, out.with_suffix(".png"))
    print("\n".join(table))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh([r["config"] for r in rows], [r["vs_plain"] for r in rows], color="tab:blue")
    for i, r in enumerate(rows):
        ax.text(r["vs_plain"], i, f" {r['vs_plain']:.2f}x, tau {r['tau']:.2f}", va="center", fontsize=8)
    ax.axvline(1.0, color="grey", linestyle=":")
    ax.set_xlabel("tokens/s vs plain SGLang (median of per-prompt ratios)")
    ax.set_title(
        f"SGLang CPU engine, {result['model']} fp32, batch 1, {result['num_prompts']} MT-Bench x "
        f"{result['max_tokens']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
