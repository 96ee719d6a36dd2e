"""`sagespec train-drafter --drafter vispec|dream|vision-prune`: a vision drafter for a
vision-language target, trained on drawn images and the target's own answers (see vision_data)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from sagespec.common.drafters import EagleDrafter, EagleHead, EagleHeadConfig, VisionDrafter, VisionModules
from sagespec.common.params import ConfigError
from sagespec.common.shipped import shipped_head
from sagespec.common.training.eagle_trainer import TrainConfig
from sagespec.common.training.vision_trainer import VISION_STATE_NAME, train_vision_drafter
from sagespec.plugins.transformers.cli.arg_types import json_object


def add_vision_arguments(p) -> None:
    g = p.add_argument_group("vision drafters")
    g.add_argument("--images", type=int, default=64, help="training examples (one drawn image + question each)")
    g.add_argument("--answer-tokens", type=int, default=128, help="length of the target's answer per example")
    g.add_argument(
        "--vision-options",
        type=json_object,
        default=None,
        help="JSON overrides of the vision drafter's settings (as for generate)",
    )
    g.add_argument(
        "--entropy-supervision",
        action="store_true",
        help="DREAM: also regress the head's hidden state onto the target layer with the lowest "
        "attention entropy (first 40%% of layers), per position",
    )
    g.add_argument("--supervise-weight", type=float, default=0.2, help="weight of that regression")
    g.add_argument(
        "--init-head",
        help="EAGLE head folder to start from (default: the one shipping for the "
        "target's text model; random when none)",
    )


def run_vision(args) -> int:
    from sagespec.common.policies import make_policy
    from sagespec.plugins._hf_tree_lm import HFTreeLM
    from sagespec.plugins.transformers.data.vision_data import cached_examples, vision_examples
    from sagespec.plugins.transformers.factory import load_target, vision_config
    from sagespec.plugins.transformers.model_loading import cache_dir
    from sagespec.plugins.transformers.runtime import SpeculativeGenerator

    if args.images < 1 or args.answer_tokens < 1:
        raise ConfigError(f"--images {args.images} and --answer-tokens {args.answer_tokens} must be >= 1")
    vision = vision_config(args.drafter, args.vision_options)
    torch.manual_seed(args.seed)
    target = load_target(args.model, args.dtype)
    model = target.model
    if not hasattr(model, "get_image_features"):
        raise ConfigError(
            f"--drafter {args.drafter} trains for a vision-language --model (e.g. smollm2-llava); "
            f"{args.model!r} is a text model"
        )
    text_cfg = model.config.get_text_config()
    embed, lm_head = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    out = Path(args.out)
    init = args.init_head or shipped_head(target.name)
    if (out / VISION_STATE_NAME).is_file():
        head = EagleHead.load(out, embed, lm_head, text_cfg.num_hidden_layers)
    elif init:
        head = EagleHead.load(init, embed, lm_head, text_cfg.num_hidden_layers)
    else:
        layers = tuple(int(x) for x in args.layers.split(",")) if args.layers else None
        head = EagleHead.random(EagleHeadConfig.for_target(text_cfg, layers), embed, lm_head, seed=args.seed)
    layers = head.config.target_layer_ids
    answer_drafter = EagleDrafter(EagleHead.load(init, embed, lm_head, text_cfg.num_hidden_layers)) if init else None
    fields = [
        args.model,
        args.dtype,
        args.images,
        args.answer_tokens,
        list(layers),
        args.entropy_supervision,
        args.seed,
        "vision-v2",
    ]
    path = cache_dir() / f"vision-examples-{hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]}.pt"

    def build():
        gen = SpeculativeGenerator(
            HFTreeLM(model, hidden_layer_ids=layers if answer_drafter else ()),
            answer_drafter,
            make_policy("sage"),
            eos_token_ids=target.eos_ids(),
        )
        return vision_examples(
            target, gen, args.images, args.answer_tokens, layers, args.entropy_supervision, seed=args.seed
        )

    examples = cached_examples(path, build)
    modules = VisionModules.load_or_init(
        out if (out / VISION_STATE_NAME).is_file() else None, vision, head.config.hidden_size, seed=args.seed
    )
    drafter = VisionDrafter(head.float(), vision, modules)
    w_draft = lm_head.float() if head.lm_head is None else lm_head.float()[head.d2t]
    cfg = TrainConfig(
        steps=args.ttt_steps,
        lr=args.lr,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_minutes=args.max_minutes,
        checkpoint_minutes=args.checkpoint_minutes,
        seed=args.seed,
    )
    state = train_vision_drafter(drafter, examples, w_draft, out, cfg, args.supervise_weight)
    print(
        json.dumps(
            {
                "out": str(out),
                "drafter": args.drafter,
                "vision": vision.__dict__,
                "steps": state.step,
                "tokens_seen": state.tokens_seen,
                "minutes": round(state.seconds / 60, 2),
                "last": state.history[-1] if state.history else None,
            }
        )
    )
    return 0
