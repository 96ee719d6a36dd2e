"""vLLM with and without speculation, side by side in one run: tok/s, tau and ratios.

Runs plain vLLM, vLLM's own `ngram` and `eagle3` (with the shipped SmolLM2 head, exported to
vLLM's EAGLE-3 format) and `sage` configurations on the same MT-Bench prompts, greedy, one after
the other, each in a fresh process (vLLM does not re-initialise cleanly after some methods in one
process), at each batch size asked for. Writes JSON plus a chart. Run it in the vLLM environment
(scripts/setup_vllm.sh), e.g.:

    .venv-vllm/bin/python benchmarks/vllm_speed.py --num-prompts 20 --max-tokens 128 --batch 1,4

At batch 1 every prompt is timed on its own and speedups are medians of per-prompt ratios against
plain vLLM (paired); at larger batches they are ratios of total throughput. `--modes` runs vLLM
the way its users do (`compiled`: vLLM's defaults, torch.compile on) and/or `eager`
(enforce_eager); every ratio compares configurations of the same mode. For sage configurations
each verify step is broken down into sage's own parts (drafting, tree attention, verification,
bookkeeping) and the rest (the engine: its forward, sampler and scheduler), also as a fraction of
a plain decode step of the same mode and batch; the chart's right panel stacks that breakdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sagespec.common.datasets import DATASETS, load_user_turns
from sagespec.common.step_times import SECTIONS
from sagespec.plugins.transformers.data.chat_prompts import chat_prompt_ids, second_turn_ids
from sagespec.plugins.transformers.model_loading import GEMMA3, resolve_model_path
from sagespec.plugins.vllm.metrics import spec_decode_counters

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")

EAGLE3_DIR = "{eagle3}"  # replaced by the exported head's folder
MEDUSA_DIR = "{medusa}"  # replaced by the shipped Medusa heads, exported to vLLM's format
ARCTIC_DIR = Path(__file__).resolve().parents[1] / ".venv-vllm-arctic"  # scripts/setup_vllm_suffix.sh
MODELS = {"smollm2": "SmolLM2-135M-Instruct", GEMMA3: "Gemma 3 270M"}
CONFIGS = {
    "plain": None,
    "vllm-ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "vllm-eagle3": {"method": "eagle3", "model": EAGLE3_DIR, "num_speculative_tokens": 4},
    "vllm-suffix": {"method": "suffix"},  # vLLM's defaults (24 tokens, tree depth 24); needs ARCTIC_DIR
    # sage with fixed budgets ("budget": a number of nodes each step) ...
    "sage-ngram": {"method": "sage", "drafter": "ngram", "policy": "sage", "max_budget": 8, "budget": 8},
    "sage-ngram-chain": {"method": "sage", "drafter": "ngram", "policy": "chain", "max_budget": 4, "budget": 4},
    # Suffix drafts are as long as the text they copy: budgets as deep as vLLM's suffix method (24).
    "sage-suffix": {
        "method": "sage",
        "drafter": "suffix",
        "policy": "sage",
        "max_budget": 24,
        "budget": 24,
        "policy_options": {"max_depth": 24},
    },
    "sage-suffix-chain": {"method": "sage", "drafter": "suffix", "policy": "chain", "max_budget": 24, "budget": 24},
    "sage-eagle": {"method": "sage", "drafter": "eagle", "policy": "sage", "max_budget": 8, "budget": 8},
    "sage-eagle-chain": {"method": "sage", "drafter": "eagle", "policy": "chain", "max_budget": 4, "budget": 4},
    # ... and cost-aware sizing (budget "auto", the default) with each drafter
    "sage-ngram-auto": {"method": "sage", "drafter": "ngram", "policy": "sage", "max_budget": 8},
    "sage-suffix-auto": {
        "method": "sage",
        "drafter": "suffix",
        "policy": "sage",
        "max_budget": 24,
        "policy_options": {"max_depth": 24},
    },
    "sage-eagle-auto": {"method": "sage", "drafter": "eagle", "policy": "sage", "max_budget": 8},
    # Medusa heads (the shipped ones): vLLM's own method with the same blocks, and sage's trees;
    # the DyTC cascade over lookup alone (no trained weights) and over lookup and the heads.
    "vllm-medusa": {"method": "medusa", "model": MEDUSA_DIR, "num_speculative_tokens": 4},
    "sage-medusa-auto": {"method": "sage", "drafter": "medusa", "policy": "sage", "max_budget": 8},
    "sage-cascade-auto": {"method": "sage", "drafter": "cascade", "policy": "sage", "max_budget": 8},
    "sage-cascade-medusa-auto": {
        "method": "sage",
        "drafter": "cascade",
        "policy": "sage",
        "max_budget": 8,
        "drafter_options": {"sources": ["ngram", "suffix", "medusa"]},
    },
}


def export_eagle3(model: Path, out_dir: Path) -> Path:
    """The shipped SmolLM2 head in vLLM's EAGLE-3 draft format (the baseline's weights are ours)."""
    from sagespec.common.shipped import shipped_head
    from sagespec.plugins.transformers.drafter_export import export_head_for_vllm

    return export_head_for_vllm(shipped_head("smollm2"), model, out_dir)


def export_medusa(model: Path, out_dir: Path) -> Path:
    """The shipped SmolLM2 Medusa heads in vLLM's Medusa format (the same blocks sage drafts with)."""
    from sagespec.common.shipped import shipped_medusa
    from sagespec.plugins.transformers.drafter_export import export_head_for_vllm

    return export_head_for_vllm(shipped_medusa("smollm2"), model, out_dir)


def sage_times(llm) -> dict | None:
    """The live sage proposer's section totals (None for other methods)."""
    from sagespec.plugins.vllm.proposer import SageProposer

    live = list(SageProposer.live)
    return live[0].times.totals() if live else None


def sage_sizing(llm) -> dict | None:
    """The live sage proposer's cost-aware sizing state (None for other methods and fixed budgets)."""
    from sagespec.plugins.vllm.proposer import SageProposer

    sizers = [p.sizer for p in SageProposer.live if p.sizer is not None]
    return sizers[0].summary() if sizers else None


def turns(model: Path, dataset: str, num_prompts: int, workload: str):
    """(first requests, a function from their answers to the second requests, or None)."""
    first = chat_prompt_ids(model, num_prompts, dataset)
    if workload == "first-turn":
        return first, None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    conversations = load_user_turns(dataset, num_prompts)
    return first, lambda answers: [
        second_turn_ids(tok, c[0], a, c[1] if len(c) > 1 else None) for c, a in zip(conversations, answers)
    ]


def warm_engine(model: Path, spec, ids, max_tokens: int, batch: int, dtype: str, eager: bool):
    """An in-process engine for one configuration, warmed up on the first prompt, and its greedy
    sampling parameters (the same for every benchmark that times vLLM)."""
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(
        model=str(model),
        dtype=dtype,
        speculative_config=spec,
        max_model_len=2048,
        seed=0,
        max_num_seqs=batch,
        disable_log_stats=False,
        enforce_eager=eager,
    )
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    llm.generate([TokensPrompt(prompt_token_ids=ids[0])], params, use_tqdm=False)
    return llm, params


def run(model: Path, spec, ids, max_tokens: int, batch: int, dtype: str, eager: bool, second=None) -> dict:
    """`second`, for two-turn workloads, makes the second requests from the first ones' answers; they
    run after all first requests, in the same engine."""
    from vllm import TokensPrompt

    llm, params = warm_engine(model, spec, ids, max_tokens, batch, dtype, eager)
    before, times_before = spec_decode_counters(llm), sage_times(llm)
    tokens, per_prompt_seconds = [], []
    start = time.perf_counter()

    def generate(prompts):
        # Batch 1: one prompt per call, timed on its own (paired per-prompt ratios); else all at once.
        for group in [[p] for p in prompts] if batch == 1 else [prompts]:
            t0 = time.perf_counter()
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in group], params, use_tqdm=batch > 1)
            per_prompt_seconds.append(time.perf_counter() - t0)
            tokens.extend(list(o.outputs[0].token_ids) for o in outs)

    generate(ids)
    if second is not None:
        generate(second(list(tokens)))
    seconds = time.perf_counter() - start
    after, times_after = spec_decode_counters(llm), sage_times(llm)
    breakdown = None
    if times_before is not None:
        spent = {k: times_after[k] - times_before[k] for k in times_after}
        steps, tree_steps = max(spent.pop("steps"), 1), spent.pop("tree_steps")
        breakdown = {k: v / steps for k, v in spent.items()}
        breakdown["engine_and_other"] = seconds / steps - sum(breakdown.values())
        breakdown["decode_steps"], breakdown["tree_steps"] = steps, tree_steps
        breakdown["tokens_per_step"] = sum(len(t) for t in tokens) / steps
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    accepted = after["vllm:spec_decode_num_accepted_tokens"] - before["vllm:spec_decode_num_accepted_tokens"]
    n_tokens = sum(len(t) for t in tokens)
    per_prompt = [len(t) / s for t, s in zip(tokens, per_prompt_seconds)] if batch == 1 else []
    return {
        "seconds": seconds,
        "tokens": n_tokens,
        "tok_per_s": n_tokens / seconds,
        "per_prompt_tok_per_s": per_prompt,
        "tau": 1 + accepted / drafts if drafts else 1.0,
        "outputs": tokens,
        "step_seconds": breakdown,
        "sizing": sage_sizing(llm),
    }


def ratio(r: dict, base: dict | None) -> float | None:
    """Median of paired per-prompt ratios when both have them, else the ratio of throughputs."""
    if base is None:
        return None
    if r["per_prompt_tok_per_s"] and base["per_prompt_tok_per_s"]:
        return statistics.median(a / b for a, b in zip(r["per_prompt_tok_per_s"], base["per_prompt_tok_per_s"]))
    return r["tok_per_s"] / base["tok_per_s"]


def rows_for(results: dict, mode: str, batch: int, num_prompts: int) -> list[dict]:
    base = results.get("plain")
    plain_step = base["seconds"] / (base["tokens"] / batch) if base else None  # one plain decode step
    rows = []
    for name, r in results.items():
        steps = r["step_seconds"]
        own = sum(v for k, v in steps.items() if k in SECTIONS) if steps else None
        rows.append(
            {
                "config": name,
                "mode": mode,
                "batch": batch,
                "spec": CONFIGS[name],
                "tok_per_s": r["tok_per_s"],
                "tau": r["tau"],
                "speedup_vs_plain": ratio(r, base),
                "speedup_vs_vllm_ngram": ratio(r, results.get("vllm-ngram")),
                "speedup_vs_vllm_eagle3": ratio(r, results.get("vllm-eagle3")),
                "speedup_vs_vllm_suffix": ratio(r, results.get("vllm-suffix")),
                "speedup_vs_vllm_medusa": ratio(r, results.get("vllm-medusa")),
                "same_as_plain": sum(a == b for a, b in zip(r["outputs"], base["outputs"])) if base else None,
                "num_prompts": num_prompts,
                "requests": len(r["outputs"]),
                "seconds": r["seconds"],
                "tokens": r["tokens"],
                "step_seconds": steps,
                "plain_step_seconds": plain_step,
                "sizing": r.get("sizing"),
                "sage_own_vs_plain_step": own / plain_step if own is not None and plain_step else None,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model",
        default="smollm2",
        choices=list(MODELS),
        help="the target; eagle configurations need a shipped head (SmolLM2 only)",
    )
    ap.add_argument("--dataset", default="mt-bench", choices=list(DATASETS))
    ap.add_argument(
        "--workload",
        default="first-turn",
        choices=["first-turn", "two-turn"],
        help="two-turn: after all first turns, each conversation's second request (its first turn, "
        "the model's answer, the dataset's next user turn or a request to edit the code) runs too",
    )
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch", default="1,4", help="comma-separated batch sizes (max_num_seqs)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument(
        "--modes",
        default="compiled",
        help="comma-separated, from ['compiled', 'eager']: vLLM's default compiled forward and/or enforce_eager",
    )
    ap.add_argument("--configs", help=f"comma-separated, from {list(CONFIGS)} (default: all the model can run)")
    ap.add_argument("--out", default="benchmarks/results/vllm_speed.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one config, write --out
    ap.add_argument("--eagle3-dir", help=argparse.SUPPRESS)  # internal: the exported head
    ap.add_argument("--medusa-dir", help=argparse.SUPPRESS)  # internal: the exported Medusa heads
    args = ap.parse_args()
    runnable = [n for n in CONFIGS if args.model == "smollm2" or ("eagle" not in n and "medusa" not in n)]
    names = (
        args.configs.split(",") if args.configs else [n for n in runnable if n != "vllm-suffix" or ARCTIC_DIR.is_dir()]
    )
    unknown = [n for n in names if n not in runnable]
    if unknown:
        ap.error(f"--configs: {unknown} cannot run on {args.model}; allowed: {runnable}")
    if "vllm-suffix" in names and not ARCTIC_DIR.is_dir():
        ap.error("--configs: vllm-suffix needs arctic-inference: run scripts/setup_vllm_suffix.sh first")
    modes = args.modes.split(",")
    if not modes or any(m not in ("compiled", "eager") for m in modes):
        ap.error(f"--modes: {args.modes!r}; allowed: compiled, eager (comma-separated)")
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        ap.error(f"--batch: {args.batch!r} is not a comma-separated list of integers")
    if any(b < 1 for b in batches) or args.num_prompts < 1 or args.max_tokens < 1:
        ap.error("--batch, --num-prompts and --max-tokens must be positive")
    model = resolve_model_path(args.model)
    if args.one:
        spec = CONFIGS[args.one]
        if spec and spec.get("model") == EAGLE3_DIR:
            spec = {**spec, "model": args.eagle3_dir}
        if spec and spec.get("model") == MEDUSA_DIR:
            spec = {**spec, "model": args.medusa_dir}
        first, second = turns(model, args.dataset, args.num_prompts, args.workload)
        result = run(
            model, spec, first, args.max_tokens, batches[0], args.dtype, eager=modes[0] == "eager", second=second
        )
        Path(args.out).write_text(json.dumps(result))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        eagle3 = str(export_eagle3(model, Path(tmp) / "eagle3")) if "vllm-eagle3" in names else ""
        medusa = str(export_medusa(model, Path(tmp) / "medusa")) if "vllm-medusa" in names else ""
        for mode in modes:
            for batch in batches:
                results = {}
                for name in names:
                    part = Path(tmp) / f"{name}-{mode}-{batch}.json"
                    cmd = [
                        sys.executable,
                        __file__,
                        "--one",
                        name,
                        "--out",
                        str(part),
                        "--model",
                        args.model,
                        "--dataset",
                        args.dataset,
                        "--workload",
                        args.workload,
                        "--num-prompts",
                        str(args.num_prompts),
                        "--max-tokens",
                        str(args.max_tokens),
                        "--batch",
                        str(batch),
                        "--dtype",
                        args.dtype,
                        "--modes",
                        mode,
                        "--eagle3-dir",
                        eagle3,
                        "--medusa-dir",
                        medusa,
                    ]
                    print(f"== {name}, {mode}, batch {batch}", flush=True)
                    env = dict(os.environ)
                    if CONFIGS[name] and CONFIGS[name]["method"] == "suffix":
                        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ARCTIC_DIR), env.get("PYTHONPATH")]))
                    subprocess.run(cmd, check=True, env=env)
                    results[name] = json.loads(part.read_text())
                rows += rows_for(results, mode, batch, args.num_prompts)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from sagespec.common.machine import machine_info  # here: --one runs may import an older sagespec

    meta = {
        "machine": machine_info(),
        "model": MODELS[args.model],
        "dataset": args.dataset,
        "workload": args.workload,
        "num_prompts": args.num_prompts,
        "max_tokens": args.max_tokens,
        "batches": batches,
        "modes": modes,
        "dtype": args.dtype,
        "greedy": True,
        "speedup": "batch 1: median of per-prompt ratios; batch > 1: ratio of throughputs",
        "step_seconds": "per decode step (steps that found no draft included): sage's sections, and the "
        "engine's forward, sampler, scheduler and prefills (engine_and_other)",
    }
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    print(table(rows))
    plot(rows, out.with_suffix(".png"), meta)


def table(rows: list[dict]) -> str:
    def x(v):
        return f"{v:.2f}x" if v is not None else "-"

    def own(r):
        steps = r["step_seconds"]
        if not steps:
            return "-"
        parts = "/".join(f"{steps[k] * 1e3:.1f}" for k in SECTIONS)
        share = r["sage_own_vs_plain_step"]
        return parts + (f" ({share:.0%})" if share is not None else "")

    lines = [
        "| config | mode | batch | tok/s | tau | vs plain | vs vLLM ngram | vs vLLM eagle3 | vs vLLM suffix | "
        "vs vLLM medusa | same as plain | sage ms/step: draft/attn/verify/book (of a plain step) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['mode']} | {r['batch']} | {r['tok_per_s']:.1f} | {r['tau']:.2f} | "
            f"{x(r['speedup_vs_plain'])} | {x(r['speedup_vs_vllm_ngram'])} | "
            f"{x(r['speedup_vs_vllm_eagle3'])} | {x(r['speedup_vs_vllm_suffix'])} | "
            f"{x(r['speedup_vs_vllm_medusa'])} | {r['same_as_plain']}/{r['requests']} | {own(r)} |"
        )
    return "\n".join(lines)


def plot(rows, path: Path, meta) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["mode"], r["batch"]) for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * len(configs) * len(groups) + 2))
    height = 0.8 / len(groups)
    for k, (mode, batch) in enumerate(groups):
        by = {r["config"]: r for r in rows if (r["mode"], r["batch"]) == (mode, batch)}
        ys = [i + k * height for i in range(len(configs))]
        left.barh(ys, [by[c]["tok_per_s"] if c in by else 0 for c in configs], height, label=f"{mode}, batch {batch}")
    left.set_yticks([i + 0.4 - height / 2 for i in range(len(configs))], configs)
    left.set_xlabel("tokens / s")
    left.invert_yaxis()
    left.legend()
    sage = [r for r in rows if r["step_seconds"]]
    labels = [f"{r['config']} ({r['mode']}, b{r['batch']}, tau {r['tau']:.2f})" for r in sage]
    bottom = [0.0] * len(sage)
    for part in (*SECTIONS, "engine_and_other"):
        ms = [r["step_seconds"][part] * 1e3 for r in sage]
        right.barh(range(len(sage)), ms, left=bottom, label=part.replace("_", " "))
        bottom = [b + m for b, m in zip(bottom, ms)]
    marked = [i for i, r in enumerate(sage) if r["plain_step_seconds"]]  # runs with plain beside them
    break_even = [
        sage[i]["plain_step_seconds"] * 1e3 * sage[i]["step_seconds"]["tokens_per_step"] / sage[i]["batch"]
        for i in marked
    ]
    right.scatter(
        break_even,
        marked,
        marker="|",
        s=300,
        color="black",
        label="plain time for the tokens a step emits (break-even)",
        zorder=3,
    )
    right.set_yticks(range(len(sage)), labels)
    right.set_xlabel("ms per decode step")
    right.invert_yaxis()
    right.legend(fontsize=8)
    fig.suptitle(
        f"vLLM CPU, {meta['model']}, {meta['dtype']}, {meta['num_prompts']} {meta['dataset']} "
        f"({meta.get('workload', 'first-turn')}) x {meta['max_tokens']}, greedy"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
