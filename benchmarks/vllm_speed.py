"""vLLM with and without speculation, side by side in one run: tok/s, tau and ratios.

Runs plain vLLM, vLLM's own `ngram`, and `sage` configurations on the same MT-Bench prompts,
greedy, one after the other, each in a fresh process (vLLM does not re-initialise cleanly after
some methods in one process), and writes JSON plus a bar chart. Run it in the vLLM
environment (scripts/setup_vllm.sh), e.g.:

    .venv-vllm/bin/python benchmarks/vllm_speed.py --num-prompts 16 --max-tokens 128 --batch 1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sagespec.plugins.vllm.metrics import spec_decode_counters

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")

CONFIGS = {
    "plain": None,
    "vllm-ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "sage-ngram": {"method": "sage", "drafter": "ngram", "policy": "sage", "num_speculative_tokens": 8},
    "sage-ngram-chain": {"method": "sage", "drafter": "ngram", "policy": "chain", "num_speculative_tokens": 4},
    "sage-eagle": {"method": "sage", "drafter": "eagle", "policy": "sage", "num_speculative_tokens": 8},
    "sage-eagle-chain": {"method": "sage", "drafter": "eagle", "policy": "chain", "num_speculative_tokens": 4},
}


def prompts(model: Path, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from sagespec.common.datasets import load_prompts
    tok = AutoTokenizer.from_pretrained(model)
    out = []
    for p in load_prompts("mt-bench", limit=n):
        ids = tok.apply_chat_template([{"role": "user", "content": p.text}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
    return out


def run(model: Path, spec, ids, max_tokens: int, batch: int, dtype: str) -> dict:
    from vllm import LLM, SamplingParams, TokensPrompt
    llm = LLM(model=str(model), dtype=dtype, speculative_config=spec, max_model_len=2048, seed=0,
              max_num_seqs=batch, disable_log_stats=False, enforce_eager=True)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    llm.generate([TokensPrompt(prompt_token_ids=ids[0])], params, use_tqdm=False)  # warm-up
    before = spec_decode_counters(llm)
    start = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=True)
    seconds = time.perf_counter() - start
    after = spec_decode_counters(llm)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    accepted = after["vllm:spec_decode_num_accepted_tokens"] - before["vllm:spec_decode_num_accepted_tokens"]
    n_tokens = sum(len(t) for t in tokens)
    return {"seconds": seconds, "tokens": n_tokens, "tok_per_s": n_tokens / seconds,
            "tau": 1 + accepted / drafts if drafts else 1.0, "outputs": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, from {list(CONFIGS)}")
    ap.add_argument("--out", default="benchmarks/results/vllm_speed.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)      # internal: run one config, write --out
    args = ap.parse_args()
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"--configs: unknown {unknown}; allowed: {list(CONFIGS)}")
    from sagespec.plugins.transformers.model_loading import smollm2_folder
    model = smollm2_folder()
    if args.one:
        ids = prompts(model, args.num_prompts)
        result = run(model, CONFIGS[args.one], ids, args.max_tokens, args.batch, args.dtype)
        Path(args.out).write_text(json.dumps(result))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            part = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, __file__, "--one", name, "--out", str(part), "--num-prompts",
                   str(args.num_prompts), "--max-tokens", str(args.max_tokens), "--batch", str(args.batch),
                   "--dtype", args.dtype]
            print(f"== {name}", flush=True)
            subprocess.run(cmd, check=True)
            results[name] = json.loads(part.read_text())
    base = results.get("plain")
    rows = []
    for name, r in results.items():
        same = sum(a == b for a, b in zip(r["outputs"], base["outputs"])) if base else None
        rows.append({"config": name, "spec": CONFIGS[name], "tok_per_s": r["tok_per_s"], "tau": r["tau"],
                     "speedup": r["tok_per_s"] / base["tok_per_s"] if base else None,
                     "same_as_plain": same, "seconds": r["seconds"], "tokens": r["tokens"]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"model": "SmolLM2-135M-Instruct", "dataset": "mt-bench", "num_prompts": args.num_prompts,
            "max_tokens": args.max_tokens, "batch": args.batch, "dtype": args.dtype, "greedy": True}
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    print(f"{'config':18} {'tok/s':>7} {'tau':>5} {'speedup':>8} same")
    for r in rows:
        print(f"{r['config']:18} {r['tok_per_s']:7.1f} {r['tau']:5.2f} {r['speedup'] or 0:7.2f}x "
              f"{r['same_as_plain']}/{args.num_prompts}")
    plot(rows, out.with_suffix(".png"), meta)


def plot(rows, path: Path, meta) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    names = [r["config"] for r in rows]
    a.barh(names, [r["tok_per_s"] for r in rows])
    a.set_xlabel("tokens / s")
    b.barh(names, [r["tau"] for r in rows])
    b.set_xlabel("tau (tokens per verify)")
    fig.suptitle(f"vLLM CPU, {meta['model']}, {meta['dtype']}, batch {meta['batch']}, "
                 f"{meta['num_prompts']} MT-Bench x {meta['max_tokens']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
