"""Vision-aware drafters on the smollm2-llava stand-in: tau, draft cost per step and draft KV length
for the text-only EAGLE head against each vision variant and keep ratio, side by side in one run.

The stand-in's vision tower is random, so its answers ignore what the images show: these figures
measure the drafting pipeline (what compression costs or saves), not VLM quality.

    .venv/bin/python benchmarks/vision_drafters.py --num-prompts 8 --max-new-tokens 64 \\
        --out benchmarks/results/vision_drafters.json [--trained vispec=DIR dream=DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
from tqdm import tqdm

from sagespec.plugins.transformers.data.vision_prompts import vision_requests
from sagespec.plugins.transformers.factory import load_target, make_drafter, make_generator, make_policy_from_args
from sagespec.plugins.transformers.runtime import TextOnlyDraftWarning

# (label, drafter, vision options)
CONFIGS = [
    ("eagle (text only)", "eagle", None),
    ("full image rows", "vision-prune", {"compress": "none"}),
    ("prune 0.5 (embedding)", "vision-prune", {"keep_ratio": 0.5}),
    ("prune 0.25 (embedding)", "vision-prune", {"keep_ratio": 0.25}),
    ("prune 0.1 (embedding)", "vision-prune", {"keep_ratio": 0.1}),
    ("prune 0.25 (attention)", "vision-prune", {"keep_ratio": 0.25, "prune_by": "attention"}),
    ("vispec (adaptor, 1 row)", "vispec", None),
    ("dream (attention 0.5 + cross-attn)", "dream", None),
]


class TimedDrafter:
    """Wraps a drafter: wall time of each `propose` and the draft KV length after the prompt's."""

    def __init__(self, drafter):
        self.inner, self.seconds, self.first_kv = drafter, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def begin(self):
        self.inner.begin()
        self._fresh = True

    def propose(self, ctx, *args):
        t = time.perf_counter()
        tree = self.inner.propose(ctx, *args)
        self.seconds.append(time.perf_counter() - t)
        if self._fresh:
            self.first_kv.append(self.inner.head.cache_length)
            self._fresh = False
        return tree


def run_config(target, requests, label, drafter_name, options, head, args):
    drafter = TimedDrafter(
        make_drafter(drafter_name, target, eagle_head=head, dtype=args.dtype, vision_options=options)
    )
    gen = make_generator(target, drafter, make_policy_from_args(args.policy, args.budget))
    emitted = verifies = 0
    seconds = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TextOnlyDraftWarning)  # the text-only baseline, on purpose
        for req in tqdm(requests, desc=label, unit="prompt", leave=False):
            r = gen.generate(None, args.max_new_tokens, image_prompt=req)
            emitted += sum(r.accepted_per_step[1:])
            verifies += len(r.accepted_per_step) - 1
            seconds.append(r.seconds / len(r.tokens))
    return {
        "config": label,
        "drafter": drafter_name,
        "vision_options": options,
        "trained_head": head,
        "tau": emitted / verifies,
        "draft_ms_per_step": 1000 * statistics.median(drafter.seconds),
        "draft_kv_after_prompt": statistics.median(drafter.first_kv),
        "ms_per_token": 1000 * statistics.median(seconds),
    }


def plot(results, prompt_len, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["config"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharey=True)
    for ax, key, title in zip(
        axes,
        ("tau", "draft_ms_per_step", "draft_kv_after_prompt"),
        (
            "tau (tokens per verify)",
            "draft time per step (ms, median)",
            f"draft KV entries after the prompt ({prompt_len} tokens)",
        ),
    ):
        ax.barh(labels, [r[key] for r in results], color="tab:blue")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].invert_yaxis()
    fig.suptitle(
        "Vision drafters on the smollm2-llava stand-in (random vision tower: measures the pipeline, not VLM quality)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--policy", default="sage")
    p.add_argument("--budget", type=int, default=8)
    p.add_argument(
        "--trained",
        nargs="*",
        default=[],
        metavar="DRAFTER=DIR",
        help="trained head + vision modules of a vision drafter: adds a row beside the untrained one "
        "(the shipped text head with the vision modules' initial state)",
    )
    p.add_argument("--out", required=True, help="JSON results; the PNG plot goes beside it")
    args = p.parse_args()
    torch.set_num_threads(2)
    trained = dict(item.split("=", 1) for item in args.trained)
    target = load_target("smollm2-llava", args.dtype)
    # held-out images (another seed) and questions: trained drafters never saw these prompts
    requests = [
        target.encode_image_chat(q, [image]) for image, q in vision_requests(args.num_prompts, seed=1000, held_out=True)
    ]
    configs = [(*c, None) for c in CONFIGS]
    configs += [
        (f"{label}, trained", name, options, trained[name]) for label, name, options in CONFIGS if name in trained
    ]
    results = [run_config(target, requests, *config, args) for config in configs]
    prompt_len = statistics.median(len(r.input_ids) for r in requests)
    out = Path(args.out)
    out.write_text(
        json.dumps(
            {
                "model": "smollm2-llava (random vision tower)",
                "dtype": args.dtype,
                "num_prompts": len(requests),
                "max_new_tokens": args.max_new_tokens,
                "policy": args.policy,
                "budget": args.budget,
                "median_prompt_len": prompt_len,
                "image_rows": 64,
                "results": results,
            },
            indent=1,
        )
    )
    plot(results, prompt_len, out.with_suffix(".png"))
    for r in results:
        print(
            f"{r['config']:38s} tau {r['tau']:.2f}  draft {r['draft_ms_per_step']:6.1f} ms/step  "
            f"draft KV {r['draft_kv_after_prompt']:.0f}  {r['ms_per_token']:.1f} ms/token"
        )


if __name__ == "__main__":
    main()
