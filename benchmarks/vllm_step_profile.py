"""Where a vLLM step's time goes, with and without sage: cProfile and torch.profiler per config.

Each configuration runs in a fresh process (in-process engine, greedy, the same prompts as
vllm_speed.py) with cProfile around its generate calls; the profile is cut into parts by the
functions that own them (sage's drafting, tree attention, verification, accepted-KV moves and
bookkeeping; vLLM's forward, sampler, scheduler and the rest), per decode step. With --torch, one
extra pass under torch.profiler lists the ops with the most self time. Run it in the vLLM
environment, e.g.:

    .venv-vllm/bin/python benchmarks/vllm_step_profile.py --dataset humaneval --batch 1,4 \\
        --configs plain,vllm-ngram,sage-ngram-auto --out benchmarks/results/vllm_step_profile.json

Profiling slows Python code more than native code, so shares here are for finding hot spots;
speed claims come from vllm_speed.py.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_speed import CONFIGS, sage_times, turns, warm_engine

from sagespec.common.machine import machine_info
from sagespec.plugins.transformers.model_loading import resolve_model_path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")

# Parts of a step, each the cumulative time of the functions named (file suffix, function name);
# the first part whose function is on a call's stack owns it (checked in this order).
PARTS = (
    ("sage drafting", (("plugins/vllm/proposer.py", "propose"),)),
    ("sage kv moves", (("kernels/paged_tree_attention.py", "move_slots"),)),
    ("sage tree attention", (("plugins/vllm/tree_step.py", "fix_attention_rows"),)),
    ("sage verification", (("plugins/vllm/tree_step.py", "verify_trees"),)),
    ("sage commit", (("plugins/vllm/tree_step.py", "commit_verdicts"),)),
    ("sage step planning", (("plugins/vllm/tree_step.py", "plan_tree_step"),)),
    ("sage step view", (("plugins/vllm/step_view.py", "build_step_view"),)),
    ("engine sampler", (("v1/sample/sampler.py", "forward"), ("v1/sample/rejection_sampler.py", "forward"))),
    ("engine logits", (("", "compute_logits"),)),
    ("engine forward", (("v1/worker/gpu_model_runner.py", "_model_forward"),)),
    ("engine input preparation", (("v1/worker/gpu_model_runner.py", "_prepare_inputs"),)),
    (
        "engine scheduler",
        (("v1/core/sched/scheduler.py", "schedule"), ("v1/core/sched/scheduler.py", "update_from_output")),
    ),
)


def _matches(key, names) -> bool:
    file, _, func = key
    return any(file.endswith(suffix) and func == name for suffix, name in names)


def part_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds of each part's functions (a part nested in another is subtracted from it)."""
    raw = stats.stats  # key -> (cc, nc, tt, ct, callers)
    cumulative = {name: sum(v[3] for k, v in raw.items() if _matches(k, fns)) for name, fns in PARTS}
    # Nesting: KV moves run inside commit; commit, verification inside the sampler hook (not a part);
    # tree attention inside the forward; logits inside the forward on some paths.
    cumulative["sage commit"] -= cumulative["sage kv moves"]
    cumulative["engine forward"] -= cumulative["sage tree attention"]
    return cumulative


def top_functions(stats: pstats.Stats, key: int, n: int) -> list[dict]:
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][key])[:n]
    return [
        {"function": f"{Path(f).name}:{line}:{func}", "calls": v[1], "self_s": v[2], "cumulative_s": v[3]}
        for (f, line, func), v in rows
    ]


def profile_one(model: Path, spec, ids, second, max_tokens: int, batch: int, dtype: str, eager: bool, torch_ops: bool):
    from vllm import TokensPrompt

    llm, params = warm_engine(model, spec, ids, max_tokens, batch, dtype, eager)

    def generate() -> int:
        tokens = []
        for prompts in (ids, None):
            if prompts is None:
                if second is None:
                    break
                prompts = second(tokens)
            for group in [[p] for p in prompts] if batch == 1 else [prompts]:
                outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in group], params, use_tqdm=False)
                tokens.extend(list(o.outputs[0].token_ids) for o in outs)
        return tokens

    times_before = sage_times(llm)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    tokens = generate()
    profiler.disable()
    seconds = time.perf_counter() - start
    times_after = sage_times(llm)
    stats = pstats.Stats(profiler)
    result = {
        "seconds": seconds,
        "tokens": sum(len(t) for t in tokens),
        "parts_s": part_seconds(stats),
        "top_cumulative": top_functions(stats, 3, 40),
        "top_self": top_functions(stats, 2, 40),
    }
    if times_before is not None:
        result["sage_sections_s"] = {k: times_after[k] - times_before[k] for k in times_after}
    if torch_ops:
        import torch.profiler as tp

        with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
            generate()
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:30]
        result["torch_ops"] = [
            {"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3, "total_ms": e.cpu_time_total / 1e3}
            for e in ops
        ]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--workload", default="two-turn", choices=["first-turn", "two-turn"])
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch", default="1,4")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--mode", default="compiled", choices=["compiled", "eager"])
    ap.add_argument("--configs", default="plain,vllm-ngram,sage-ngram-auto")
    ap.add_argument("--torch", action="store_true", help="also one pass under torch.profiler (its top ops)")
    ap.add_argument("--out", default="benchmarks/results/vllm_step_profile.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS or "eagle" in n or "medusa" in n]
    if unknown:
        ap.error(f"--configs: {unknown}; allowed: configs of vllm_speed.py without trained heads")
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        ap.error(f"--batch: {args.batch!r} is not a comma-separated list of integers")
    model = resolve_model_path(args.model)
    if args.one:
        first, second = turns(model, args.dataset, args.num_prompts, args.workload)
        result = profile_one(
            model,
            CONFIGS[args.one],
            first,
            second,
            args.max_tokens,
            batches[0],
            args.dtype,
            args.mode == "eager",
            args.torch,
        )
        Path(args.out).write_text(json.dumps(result))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in batches:
            for name in names:
                part = Path(tmp) / f"{name}-{batch}.json"
                cmd = [sys.executable, __file__, "--one", name, "--out", str(part), "--batch", str(batch)]
                for flag in ("model", "dataset", "workload", "num_prompts", "max_tokens", "dtype", "mode"):
                    cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
                cmd += ["--torch"] if args.torch else []
                print(f"== {name}, batch {batch}", flush=True)
                subprocess.run(cmd, check=True)
                rows.append({"config": name, "batch": batch, **json.loads(part.read_text())})
    meta = {**vars(args), "machine": machine_info(), "python": platform.python_version()}
    meta.pop("one")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    for r in rows:
        per_token = {k: v / r["tokens"] * 1e3 for k, v in r["parts_s"].items()}
        print(
            f"{r['config']:>18} b{r['batch']}: {r['tokens'] / r['seconds']:.1f} tok/s (profiled); ms per token: "
            + ", ".join(f"{k} {v:.2f}" for k, v in per_token.items() if v > 0.005)
        )
    plot(rows, out.with_suffix(".png"), meta)


def plot(rows: list[dict], path: Path, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 2))
    labels = [f"{r['config']} (b{r['batch']})" for r in rows]
    left = [0.0] * len(rows)
    for name, _ in PARTS:
        ms = [r["parts_s"][name] / r["tokens"] * 1e3 * r["batch"] for r in rows]
        ax.barh(range(len(rows)), ms, left=left, label=name)
        left = [a + b for a, b in zip(left, ms)]
    other = [r["seconds"] / r["tokens"] * 1e3 * r["batch"] - done for r, done in zip(rows, left)]
    ax.barh(range(len(rows)), other, left=left, label="other (outputs, Python glue)", color="lightgrey")
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms per emitted token per request (profiled; batch x wall / tokens)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"vLLM CPU step profile, {meta['model']}, {meta['dtype']}, {meta['mode']}, {meta['dataset']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
