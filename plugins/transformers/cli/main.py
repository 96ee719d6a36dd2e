"""`sagespec` command line: generate and bench on the reference runtime."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sagespec.common.datasets import DATASETS
from sagespec.common.drafters import CASCADE_SOURCES, DRAFTER_NAMES, VISION_PRESETS
from sagespec.common.drafters.self_draft import DEFAULT_FRACTIONS
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES
from sagespec.common.verify import available_rules
from sagespec.common.verify.acceptance import parse_acceptance
from sagespec.plugins.transformers.cli.arg_types import fractions, json_object, names


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, no usage dump
        self.exit(2, f"sagespec: error: {message} (see --help)\n")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default="smollm2",
        help="'smollm2' (embedded default), 'gemma3-270m' (Gemma 3 270M base, sliding-window attention), "
        "'smollm2-llava' (SmolLM2's vision-language stand-in) or a Hugging Face model folder",
    )
    p.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float32"],
        help="bf16 for speed; float32 for exact greedy identity checks",
    )
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--acceptance",
        default="auto",
        help=f"the acceptance rule: a name {available_rules()} or a JSON object with 'rule' and its options, "
        'e.g. \'{"rule": "kl-judge", "threshold": 0.5}\'; typical, kl-judge and judge are lossy',
    )
    p.add_argument("--draft-model", help="Hugging Face folder of a draft model sharing the target's tokenizer")
    p.add_argument(
        "--eagle-head",
        help="folder of a trained EAGLE head (config.json + model.safetensors; a vision "
        "drafter's trained modules beside them)",
    )
    p.add_argument(
        "--vision-options",
        type=json_object,
        default=None,
        help="JSON overrides of the vision drafters' settings, e.g. '{\"keep_ratio\": 0.25}' "
        "(compress, keep_ratio, prune_by, num_queries, global_fusion, cross_attention, num_heads)",
    )
    p.add_argument("--medusa-heads", help="folder of trained Medusa heads (sagespec train-drafter --drafter medusa)")
    p.add_argument(
        "--self-levels",
        type=fractions,
        default=DEFAULT_FRACTIONS,
        help="self drafts: the shares of the target's layers each level skips, calibrated at start "
        f"(default {','.join(map(str, DEFAULT_FRACTIONS))})",
    )
    p.add_argument(
        "--cascade-sources",
        type=names,
        default=("self", "ngram"),
        help=f"cascade: the draft sources DyTC routes among, from {list(CASCADE_SOURCES)} (default self,ngram: "
        "no trained weights)",
    )
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (pinned)")


def drafter_options(args) -> dict:
    """The options of the drafters that take some beyond their weights."""
    return {
        "medusa_heads": args.medusa_heads,
        "self_levels": args.self_levels,
        "cascade_sources": args.cascade_sources,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sagespec", description="Adaptive speculative decoding: the reference runtime.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("generate", help="generate text for one prompt")
    _common(g)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file")
    g.add_argument("--drafter", default="ngram", choices=["none", *DRAFTER_NAMES])
    g.add_argument("--policy", default="sage", choices=sorted(POLICIES))
    g.add_argument(
        "--budget",
        default="auto",
        help="drafted nodes per step: 'auto' (default: sized each step by a latency model measured at "
        "start-up and the drafter's calibrated acceptance) or a number",
    )
    g.add_argument(
        "--max-budget",
        type=int,
        default=None,
        help="most drafted nodes per step under --budget auto (default: the policy's own budget)",
    )
    g.add_argument(
        "--image",
        action="append",
        default=[],
        help="an image file to put before the prompt (repeatable; needs a vision-language model)",
    )
    g.add_argument(
        "--strict-multimodal",
        action="store_true",
        help="refuse image prompts a text-only drafter would draft (default: draft from the text, warn)",
    )
    g.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    b = sub.add_parser("bench", help="plain decoding and speculative configs side by side on a dataset")
    _common(b)
    b.add_argument("--dataset", required=True, choices=list(DATASETS))
    b.add_argument("--num-prompts", type=int, default=20)
    b.add_argument(
        "configs",
        nargs="*",
        default=["ngram:chain", "ngram:sage"],
        help="DRAFTER:POLICY[:BUDGET], e.g. ngram:chain ngram:sage:16 eagle:dynamic",
    )
    b.add_argument("--out", default="bench.json", help="JSON results file")
    b.add_argument("--plot", default="bench.png", help="PNG plot file")
    t = sub.add_parser("train-drafter", help="train an EAGLE-3-style head for the target")
    from sagespec.plugins.transformers.cli.train import add_arguments

    add_arguments(t)
    from sagespec.plugins.transformers.cli.judge import add_mine_arguments, add_train_arguments

    add_mine_arguments(sub.add_parser("mine-judge", help="mine important draft mismatches on a checkable task"))
    add_train_arguments(sub.add_parser("train-judge", help="train a judge file from mined mismatches"))
    e = sub.add_parser("export-drafter", help="export trained heads to vLLM's format (EAGLE-3 or Medusa)")
    e.add_argument("--head", required=True, help="head folder (config.json + model.safetensors)")
    e.add_argument("--out", required=True, help="folder to write the vLLM draft into")
    e.add_argument("--model", default="smollm2", help="the target the head was trained for")
    e.add_argument("--threads", type=int, default=None)
    return parser


def _sampling(args):
    from sagespec.common.sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def parse_budget_arg(budget: str, max_budget: int | None):
    """--budget: 'auto' or an integer >= 1 (then --max-budget does not apply)."""
    if budget == "auto":
        if max_budget is not None and max_budget < 1:
            raise ConfigError(f"--max-budget {max_budget} must be >= 1")
        return "auto"
    try:
        value = int(budget)
    except ValueError:
        raise ConfigError(f"--budget {budget!r} must be 'auto' or an integer >= 1") from None
    if value < 1:
        raise ConfigError(f"--budget {value} must be >= 1")
    if max_budget is not None:
        raise ConfigError("--max-budget applies to --budget auto only; a fixed --budget is the number of nodes")
    return value


def _check(args) -> None:
    if args.command in ("train-drafter", "export-drafter", "mine-judge", "train-judge"):
        return
    if args.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens {args.max_new_tokens} must be >= 1")
    if args.threads < 1:
        raise ConfigError(f"--threads {args.threads} must be >= 1")
    if args.command == "generate":
        args.budget = parse_budget_arg(args.budget, args.max_budget)
    if getattr(args, "num_prompts", 1) < 1:
        raise ConfigError(f"--num-prompts {args.num_prompts} must be >= 1")
    args.acceptance, args.acceptance_options = parse_acceptance(args.acceptance, "--acceptance")
    if args.command == "generate":
        from sagespec.plugins.transformers.factory import check_cascade_sources, vision_config

        vision_config(args.drafter, args.vision_options)
        check_cascade_sources(args.cascade_sources)
    if getattr(args, "medusa_heads", None):  # before any model is loaded
        from sagespec.common.drafters.checkpoint import read_config

        read_config(args.medusa_heads, "--medusa-heads")
    _sampling(args)


def cmd_generate(args) -> int:
    from sagespec.common.sizing import Sizer
    from sagespec.plugins.transformers.factory import (
        load_target,
        make_drafter,
        make_generator,
        make_policy_from_args,
        policy_budget,
    )

    if args.prompt_file is not None:
        path = Path(args.prompt_file)
        if not path.is_file():
            raise ConfigError(f"--prompt-file {args.prompt_file!r}: no such file")
        text = path.read_text()
    else:
        text = args.prompt
    images = [_open_image(path) for path in args.image]
    auto = args.budget == "auto"
    policy = make_policy_from_args(args.policy, args.max_budget if auto else args.budget)
    target = load_target(args.model, args.dtype)
    drafter = make_drafter(
        args.drafter,
        target,
        args.draft_model,
        args.eagle_head,
        args.dtype,
        args.seed,
        vision_options=args.vision_options,
        **drafter_options(args),
    )
    sizer = Sizer(policy_budget(policy)) if auto and drafter is not None else None
    gen = make_generator(
        target, drafter, policy, args.acceptance, args.acceptance_options, args.strict_multimodal, sizer
    )
    if sizer is not None:
        measured = gen.profile_latency(sizer.max_budget + 1)
        print(
            "[latency profile, ms per forward by tokens: "
            + ", ".join(f"{n}: {t * 1e3:.1f}" for n, t in measured.items())
            + "]",
            file=sys.stderr,
        )
    if images:
        res = gen.generate(
            None,
            args.max_new_tokens,
            _sampling(args),
            seed=args.seed,
            image_prompt=target.encode_image_chat(text, images),
        )
    else:
        res = gen.generate(target.encode_chat(text), args.max_new_tokens, _sampling(args), seed=args.seed)
    out_text = target.tokenizer.decode(res.tokens, skip_special_tokens=True) if target.tokenizer else ""
    if args.json:
        print(
            json.dumps(
                {
                    "tokens": res.tokens,
                    "text": out_text,
                    "steps": res.steps,
                    "accepted_per_step": res.accepted_per_step,
                    "seconds": round(res.seconds, 4),
                    "acceptance": {"rule": res.acceptance, **res.acceptance_options},
                    "lossless": res.lossless,
                }
            )
        )
    else:
        print(out_text)
        print(
            f"[{len(res.tokens)} tokens, {res.steps} target forwards, tau {res.mean_accepted_length:.2f}, "
            f"{len(res.tokens) / res.seconds:.1f} tok/s]",
            file=sys.stderr,
        )
    return 0


def _open_image(path: str):
    from PIL import Image, UnidentifiedImageError

    if not Path(path).is_file():
        raise ConfigError(f"--image {path!r}: no such file")
    try:
        return Image.open(path).convert("RGB")
    except UnidentifiedImageError:
        raise ConfigError(f"--image {path!r}: not an image PIL can read") from None


def cmd_bench(args) -> int:
    from sagespec.plugins.transformers.cli.bench import parse_config, run_bench

    configs = [parse_config(c) for c in args.configs]
    if args.vision_options is not None:
        from sagespec.plugins.transformers.factory import vision_config

        vision = [c.drafter for c in configs if c.drafter in VISION_PRESETS]
        if not vision:
            raise ConfigError(f"--vision-options: no bench config uses a vision drafter ({', '.join(VISION_PRESETS)})")
        vision_config(vision[0], args.vision_options)
    return run_bench(args, configs, _sampling(args))


def cmd_train(args) -> int:
    from sagespec.plugins.transformers.cli.train import run

    return run(args)


def cmd_mine_judge(args) -> int:
    from sagespec.plugins.transformers.cli.judge import run_mine

    return run_mine(args)


def cmd_train_judge(args) -> int:
    from sagespec.plugins.transformers.cli.judge import run_train

    return run_train(args)


def cmd_export(args) -> int:
    from sagespec.plugins.transformers.drafter_export import export_head_for_vllm

    out = export_head_for_vllm(args.head, args.model, args.out)
    kind = "Medusa" if json.loads((out / "config.json").read_text())["model_type"] == "medusa" else "EAGLE-3"
    print(f"wrote vLLM {kind} draft to {out}")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check(args)
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        return {
            "generate": cmd_generate,
            "bench": cmd_bench,
            "train-drafter": cmd_train,
            "export-drafter": cmd_export,
            "mine-judge": cmd_mine_judge,
            "train-judge": cmd_train_judge,
        }[args.command](args)
    except (ConfigError, ValueError, FileNotFoundError) as e:
        print(f"sagespec: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
