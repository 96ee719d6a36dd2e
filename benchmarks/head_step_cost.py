"""One EAGLE head draft step against one target decode forward, at batch 1 and 16: the share of a
target forward a draft step costs, for the shipped head and for draft vocabularies of other sizes.

A draft step is what every drafted tree level costs per request group: the head's projections and
MLP over the batch's rows (`hidden_step_many`, each request attending to its own cache of
`--context` pairs), its output layer over the draft vocabulary and a top-k. The target forward is
one decode token per sequence over a KV cache of `--context` tokens (Hugging Face, SDPA).
Configs run in mirrored rounds (A B C, C B A); medians are reported.

    .venv/bin/python benchmarks/head_step_cost.py --vocab 6144,8192,12288 --dtype float32,bfloat16 \\
        --out benchmarks/results/head_step_cost.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch

from sagespec.common.drafters import EagleHead
from sagespec.common.drafters.eagle_head import HeadCall
from sagespec.common.machine import machine_info
from sagespec.common.shipped import shipped_head
from sagespec.common.training.draft_vocab import resize_draft_vocab
from sagespec.plugins.transformers.model_loading import load_model

TOP_K = 8  # drafted children per node, as SAGE trees take at most


def timed(fn, repeats: int) -> float:
    """Median seconds of fn() over repeats calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def target_step(model, batch: int, context: int):
    from transformers import DynamicCache

    ids = torch.randint(100, 20000, (batch, context))
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    step_ids = torch.randint(100, 20000, (batch, 1))

    def run() -> None:
        with torch.no_grad():
            model(input_ids=step_ids, past_key_values=cache, use_cache=True)
            cache.crop(context)  # every call decodes the same position

    return run


def head_step(head: EagleHead, batch: int, context: int):
    c = head.config
    heads = []
    for _ in range(batch):
        h = copy.copy(head)  # a per-request copy sharing the weights, as the drafters make
        h.k_cache = torch.randn(context, c.num_key_value_heads, c.head_dim, dtype=head.fc.weight.dtype)
        h.v_cache = torch.randn_like(h.k_cache)
        heads.append(h)
    feats = torch.randn(1, c.hidden_size, dtype=head.fc.weight.dtype)
    mask = torch.zeros(1, context + 1, dtype=head.fc.weight.dtype)

    def run() -> None:
        with torch.no_grad():
            calls = [HeadCall(h, torch.tensor([7]), feats, torch.tensor([context]), mask) for h in heads]
            outs = EagleHead.hidden_step_many(calls)
            for h in heads:  # keep the caches at `context`
                h.k_cache, h.v_cache = h.k_cache[:context], h.v_cache[:context]
            torch.topk(head.draft_logits(torch.cat(outs)), TOP_K, dim=-1)

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--vocab", default="6144,8192,12288", help="draft vocabulary sizes (the shipped head's rows kept)")
    p.add_argument("--dtype", default="float32,bfloat16")
    p.add_argument("--batch", default="1,16")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--rounds", type=int, default=4, help="mirrored rounds (an even number)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/results/head_step_cost.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for dtype in args.dtype.split(","):
        model, _ = load_model(args.model, dtype)
        embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
        shipped = EagleHead.load(shipped_head(args.model), embed, lm_head, model.config.num_hidden_layers)
        shipped = shipped.to(getattr(torch, dtype))
        counts = torch.arange(model.config.vocab_size, 0, -1)  # vocabularies grow by id beyond the shipped rows
        for batch in (int(b) for b in args.batch.split(",")):
            configs = {"target forward": target_step(model, batch, args.context)}
            for size in (int(v) for v in args.vocab.split(",")):
                extra = torch.tensor(
                    sorted(set(torch.topk(counts, size * 2).indices.tolist()) - set(shipped.d2t.tolist()))
                )
                d2t = torch.cat([shipped.d2t, extra])[:size].sort().values if size > shipped.d2t.numel() else None
                head = shipped if d2t is None else resize_draft_vocab(shipped, d2t)
                configs[f"head, draft vocab {size}"] = head_step(head, batch, args.context)
            names = list(configs)
            times: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds):
                for name in names if r % 2 == 0 else names[::-1]:
                    times[name].append(timed(configs[name], args.repeats))
            target_ms = 1e3 * statistics.median(times["target forward"])
            for name in names:
                ms = 1e3 * statistics.median(times[name])
                rows.append(
                    {
                        "dtype": dtype,
                        "batch": batch,
                        "config": name,
                        "ms": round(ms, 3),
                        "share_of_target_forward": round(ms / target_ms, 4),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"context": args.context, "top_k": TOP_K, "machine": machine_info(), "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["dtype"], r["batch"]) for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.5), squeeze=False)
    for ax, (dtype, batch) in zip(axes[0], groups):
        mine = [r for r in rows if r["dtype"] == dtype and r["batch"] == batch and r["config"] != "target forward"]
        ax.bar(
            [r["config"].removeprefix("head, draft vocab ") for r in mine], [r["share_of_target_forward"] for r in mine]
        )
        ax.axhline(0.07, color="red", linestyle="--", label="7% of a target forward")
        ax.set_title(f"{dtype}, batch {batch}")
        ax.set_xlabel("draft vocabulary")
        ax.set_ylabel("draft step / target forward")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
