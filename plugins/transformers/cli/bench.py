"""`sagespec bench`: plain decoding and each speculative config, side by side in one process.

Per prompt, every config runs back to back (so drift on a noisy machine hits all alike); the
speedup of a config is the median over prompts of plain seconds / config seconds. Writes JSON and
a PNG, prints a table."""

from __future__ import annotations

import json
import platform
import statistics
from dataclasses import dataclass

import torch
from tqdm import tqdm

from sagespec.common.datasets import load_prompts
from sagespec.common.drafters import DRAFTER_NAMES, VISION_PRESETS
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES
from sagespec.plugins.transformers.factory import load_target, make_drafter, make_generator, make_policy_from_args


@dataclass(frozen=True)
class BenchConfig:
    drafter: str
    policy: str
    budget: int | None = None

    @property
    def label(self) -> str:
        if self.drafter == "none":
            return "plain"
        return f"{self.drafter}:{self.policy}" + (f":{self.budget}" if self.budget else "")


def parse_config(spec: str) -> BenchConfig:
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ConfigError(f"bench config {spec!r} must be DRAFTER:POLICY[:BUDGET]")
    if parts[0] not in DRAFTER_NAMES:
        raise ConfigError(f"bench config {spec!r}: drafter {parts[0]!r} is not one of {list(DRAFTER_NAMES)}")
    if parts[1] not in POLICIES:
        raise ConfigError(f"bench config {spec!r}: policy {parts[1]!r} is not one of {sorted(POLICIES)}")
    budget = None
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise ConfigError(f"bench config {spec!r}: budget {parts[2]!r} must be an integer >= 1")
        budget = int(parts[2])
    return BenchConfig(parts[0], parts[1], budget)


def run_bench(args, configs: list[BenchConfig], sampling) -> int:
    prompts = load_prompts(args.dataset, args.num_prompts)
    target = load_target(args.model, args.dtype)
    all_configs = [BenchConfig("none", "chain")] + configs
    gens = {}
    for c in all_configs:
        drafter = make_drafter(
            c.drafter,
            target,
            args.draft_model,
            args.eagle_head,
            args.dtype,
            args.seed,
            vision_options=args.vision_options if c.drafter in VISION_PRESETS else None,
            medusa_heads=args.medusa_heads,
            self_levels=args.self_levels,
            cascade_sources=args.cascade_sources,
        )
        gens[c.label] = make_generator(
            target, drafter, make_policy_from_args(c.policy, c.budget), args.acceptance, args.acceptance_options
        )
    encoded = [target.encode_chat(p.text) for p in prompts]
    for g in gens.values():  # warm-up: first calls pay one-time allocation costs
        g.generate(encoded[0][:32], 4, sampling, seed=args.seed)

    runs = {label: [] for label in gens}
    plain_tokens = []  # "plain" runs first for every prompt
    for i, ids in enumerate(tqdm(encoded, desc=f"bench {args.dataset}", unit="prompt")):
        for label, g in gens.items():
            r = g.generate(ids, args.max_new_tokens, sampling, seed=args.seed + i)
            runs[label].append(
                {
                    "prompt": prompts[i].id,
                    "tokens": len(r.tokens),
                    "seconds": r.seconds,
                    "steps": r.steps,
                    "accepted_per_step": r.accepted_per_step,
                    "depths": [s.depth if s else 0 for s in r.shapes],
                    "widths": [s.width if s else 0 for s in r.shapes],
                    "nodes": r.nodes_per_step,
                    "entropies": r.entropies,
                    "draft_seconds": r.draft_seconds,
                    "drafter_report": r.drafter_report,
                    "same_as_plain": None if label == "plain" else r.tokens == plain_tokens[i],
                }
            )
            if label == "plain":
                plain_tokens.append(r.tokens)
    summary = summarise(runs)
    result = {
        "dataset": args.dataset,
        "num_prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "model": args.model,
        "dtype": args.dtype,
        "temperature": sampling.temperature,
        "acceptance": {"rule": args.acceptance, **args.acceptance_options},
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "summary": summary,
        "runs": runs,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    from sagespec.plugins.transformers.cli.bench_plot import plot_bench

    plot_bench(result, args.plot)
    print(format_table(summary))
    print(f"wrote {args.out} and {args.plot}")
    return 0


def summarise(runs: dict) -> dict:
    plain = runs["plain"]
    out = {}
    for label, rs in runs.items():
        tokens = sum(r["tokens"] for r in rs)
        secs = sum(r["seconds"] for r in rs)
        verify_steps = [a for r in rs for a in r["accepted_per_step"][1:]]
        speedups = [p["seconds"] / r["seconds"] for p, r in zip(plain, rs)]
        same = [r["same_as_plain"] for r in rs if r["same_as_plain"] is not None]
        drafted = sum(n for r in rs for n in r["nodes"])
        accepted = sum(a - 1 for r in rs for a in r["accepted_per_step"][1:])
        out[label] = {
            "tok_per_s": tokens / secs,
            "tau": sum(verify_steps) / max(1, len(verify_steps)),
            "median_speedup": statistics.median(speedups),
            "tokens": tokens,
            "seconds": secs,
            "identical_to_plain": (sum(same), len(same)) if same else None,
            # per drafted node: the share accepted, and the drafting time it cost
            "accepted_per_node": accepted / drafted if drafted else None,
            "draft_ms_per_node": 1e3 * sum(r["draft_seconds"] for r in rs) / drafted if drafted else None,
            "draft_share": sum(r["draft_seconds"] for r in rs) / secs,
            "drafter_report": rs[-1]["drafter_report"],
        }
    return out


def format_table(summary: dict) -> str:
    lines = [
        f"{'config':<24}{'tok/s':>9}{'tau':>7}{'speedup':>9}{'acc/node':>10}{'ms/node':>9}{'same as plain':>15}",
        "-" * 83,
    ]
    for label, s in summary.items():
        same = "-" if s["identical_to_plain"] is None else "{}/{}".format(*s["identical_to_plain"])
        acc = "-" if s["accepted_per_node"] is None else f"{s['accepted_per_node']:.2f}"
        ms = "-" if s["draft_ms_per_node"] is None else f"{s['draft_ms_per_node']:.2f}"
        lines.append(
            f"{label:<24}{s['tok_per_s']:>9.1f}{s['tau']:>7.2f}{s['median_speedup']:>8.2f}x{acc:>10}{ms:>9}{same:>15}"
        )
    return "\n".join(lines)
