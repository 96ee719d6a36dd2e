"""Mean accepted length tau (tokens per verify, bonus included) of a drafter on a prompt set,
greedy, without the plain-decoding baseline (acceptance only; for speed use `sagespec bench`).

    .venv/bin/python benchmarks/drafter_acceptance.py --drafter eagle [--eagle-head DIR] \\
        --policy chain --budget 5 --dataset mt-bench --num-prompts 80 --max-new-tokens 128 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from tqdm import tqdm

from sagespec.common.datasets import load_prompts
from sagespec.plugins.transformers.factory import load_target, make_drafter, make_generator, make_policy_from_args


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    p.add_argument("--drafter", default="eagle")
    p.add_argument("--eagle-head")
    p.add_argument("--draft-model")
    p.add_argument("--policy", default="chain")
    p.add_argument("--budget", type=int, default=5)
    p.add_argument("--dataset", default="mt-bench")
    p.add_argument("--num-prompts", type=int, default=80)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(2)
    target = load_target(args.model, args.dtype)
    drafter = make_drafter(args.drafter, target, args.draft_model, args.eagle_head, args.dtype)
    gen = make_generator(target, drafter, make_policy_from_args(args.policy, args.budget))
    taus, emitted, verifies = [], 0, 0
    for prompt in tqdm(load_prompts(args.dataset, args.num_prompts), desc="acceptance", unit="prompt"):
        r = gen.generate(target.encode_chat(prompt.text), args.max_new_tokens)
        taus.append(r.mean_accepted_length)
        emitted += sum(r.accepted_per_step[1:])
        verifies += len(r.accepted_per_step) - 1
    result = {
        "drafter": args.drafter,
        "eagle_head": args.eagle_head,
        "policy": args.policy,
        "budget": args.budget,
        "dataset": args.dataset,
        "num_prompts": len(taus),
        "max_new_tokens": args.max_new_tokens,
        "dtype": args.dtype,
        "tau": emitted / verifies,
        "median_prompt_tau": statistics.median(taus),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
