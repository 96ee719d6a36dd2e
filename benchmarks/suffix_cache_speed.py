"""The suffix drafter's cost per request-step as its cache fills, on real text: ShareGPT
conversations (every turn, SmolLM2's tokenizer, at most 1024 tokens each) are cached one per finished request; held-out
conversations are then drafted at random points. Writes JSON and a PNG (latency against cached
requests). No model runs: this times the drafter alone.

    .venv/bin/python benchmarks/suffix_cache_speed.py --cached 0,1000,10000 --out benchmarks/results/suffix_cache_speed.json

For each cache size: median and p99 milliseconds per `propose` (the request's own match plus the
cache's), for a chain (depth 8) and a SAGE-sized tree (budget 16, width 4), and the mean number of
drafted tokens the held-out text itself continues with (a drafting-quality proxy: the text is not
the target model's output).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from sagespec.common.datasets import dataset_file, iter_sharegpt
from sagespec.common.drafters import DraftContext, SuffixDrafter
from sagespec.common.drafters.suffix_cache import SuffixCache
from sagespec.common.policies import TreeShape
from sagespec.common.sampling import SamplingParams
from sagespec.plugins.transformers.model_loading import resolve_model_path

SHAPES = {
    "chain depth 8": TreeShape(depth=8, width=1, budget=8),
    "tree budget 16": TreeShape(depth=8, width=4, budget=16),
}


def conversations(limit: int) -> list[np.ndarray]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
    out = []
    for conv in tqdm(iter_sharegpt(dataset_file("sharegpt"), limit), total=limit, desc="tokenizing ShareGPT"):
        out.append(np.asarray(tok("\n".join(conv["turns"]))["input_ids"][:1024], dtype=np.int64))
    return out


def accepted(tree, truth: np.ndarray) -> int:
    """Drafted tokens the true continuation follows through the tree (greedy walk)."""
    node, n = 0, 0
    for tok in truth:
        nxt = [c for c in tree.children(node) if int(tree.tokens[c]) == int(tok)]
        if not nxt:
            break
        node, n = nxt[0], n + 1
    return n


def measure(cache: SuffixCache, held_out: list[np.ndarray], points: int, rng) -> dict:
    drafter = SuffixDrafter(cache)
    rows = {}
    for label, shape in SHAPES.items():
        times, hits = [], []
        for _ in range(points):
            seq = held_out[int(rng.integers(len(held_out)))]
            cut = int(rng.integers(16, max(17, seq.size - 8)))
            context = DraftContext(torch.from_numpy(seq[:cut]))
            t0 = time.perf_counter()
            tree = drafter.propose(context, shape, SamplingParams(), None)
            times.append(time.perf_counter() - t0)
            hits.append(accepted(tree, seq[cut : cut + shape.depth]))
        rows[label] = {
            "median_ms": 1e3 * statistics.median(times),
            "p99_ms": 1e3 * float(np.percentile(times, 99)),
            "mean_text_accepted": float(np.mean(hits)),
        }
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cached", default="0,1000,10000", help="comma-separated numbers of cached requests")
    ap.add_argument("--held-out", type=int, default=200, help="conversations drafted from, never cached")
    ap.add_argument("--points", type=int, default=2000, help="draft calls timed per cache size and shape")
    ap.add_argument("--max-cached-tokens", type=int, default=1 << 23, help="the cache's size in tokens")
    ap.add_argument("--out", default="benchmarks/results/suffix_cache_speed.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    sizes = sorted(int(x) for x in args.cached.split(","))
    convs = conversations(sizes[-1] + args.held_out)
    held_out, cached = convs[: args.held_out], convs[args.held_out :]
    cache = SuffixCache(max_tokens=args.max_cached_tokens)
    rng = np.random.default_rng(0)
    results, added, add_seconds = [], 0, 0.0
    for size in sizes:
        t0 = time.perf_counter()
        for seq in tqdm(cached[added:size], desc=f"caching up to {size}", disable=size == added):
            cache.add(seq)
        add_seconds += time.perf_counter() - t0
        added = size
        live = min(cache.end, cache.capacity)
        results.append(
            {
                "cached_requests": size,
                "cached_tokens_live": live,
                "all_live": cache.end <= cache.capacity,
                "add_ms_per_request": 1e3 * add_seconds / max(added, 1),
                **measure(cache, held_out, args.points, rng),
            }
        )
        print(json.dumps(results[-1]))
    meta = {
        "dataset": "sharegpt (all turns)",
        "tokenizer": "SmolLM2-135M-Instruct",
        "held_out": args.held_out,
        "points": args.points,
        "max_cached_tokens": cache.capacity,
        "shapes": {k: str(v) for k, v in SHAPES.items()},
        "memory_bytes": int(cache.tokens.nbytes + cache.prev.nbytes + cache.head.nbytes),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [r["cached_requests"] for r in results]
    for label in SHAPES:
        left.plot(sizes, [r[label]["median_ms"] for r in results], marker="o", label=f"{label}, median")
        left.plot(sizes, [r[label]["p99_ms"] for r in results], marker="x", linestyle="--", label=f"{label}, p99")
        right.plot(sizes, [r[label]["mean_text_accepted"] for r in results], marker="o", label=label)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set(xlabel="cached requests", ylabel="ms per request-step", title="suffix drafter cost")
    right.set(
        xlabel="cached requests",
        ylabel="drafted tokens the text continues with",
        title="drafts matching held-out ShareGPT text",
    )
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
