"""Building a runtime from names: target model, drafter, policy, acceptance rule."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from sagespec.common.drafters import (
    DRAFTER_NAMES,
    LOOKUP_DRAFTERS,
    VISION_PRESETS,
    DraftModelDrafter,
    EagleDrafter,
    EagleHead,
    EagleHeadConfig,
    VisionConfig,
    VisionDrafter,
    VisionModules,
    check_shared_vocabulary,
    lookup_drafters,
)
from sagespec.common.params import ConfigError, check_int
from sagespec.common.policies import POLICIES, DecodeState, make_policy
from sagespec.common.shipped import shipped_head
from sagespec.common.sizing import Sizer
from sagespec.common.verify.acceptance import check_acceptance
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.model_loading import load_model, load_processor
from sagespec.plugins.transformers.multimodal import ImagePrompt, build_image_prompt, image_token_id
from sagespec.plugins.transformers.runtime import SpeculativeGenerator


@dataclass
class LoadedTarget:
    model: object
    tokenizer: object
    name: str = ""

    def encode_chat(self, text: str) -> list[int]:
        tok = self.tokenizer
        if tok is None:
            raise ConfigError("this model folder has no tokenizer; text prompts need one")
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        return tok.encode(text)

    def encode_image_chat(self, text: str, images) -> ImagePrompt:
        """A user turn with the PIL `images` (placed before the text) and `text`, ready to generate."""
        image_token_id(self.model)  # a clear error for a text-only model, before the processor
        processor = load_processor(self.name)
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
        prompt = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = processor(images=list(images), text=prompt, return_tensors="pt")
        return build_image_prompt(self.model, inputs["input_ids"][0], inputs["pixel_values"])

    def eos_ids(self) -> list[int]:
        eos = (
            getattr(self.model.generation_config, "eos_token_id", None)
            or self.model.config.get_text_config().eos_token_id
        )
        if eos is None:
            return []
        return list(eos) if isinstance(eos, (list, tuple)) else [eos]


def load_target(model: str, dtype: str) -> LoadedTarget:
    lm, tok = load_model(model, dtype)
    return LoadedTarget(lm, tok, model)


def make_drafter(
    name: str,
    target: LoadedTarget,
    draft_model: str | None = None,
    eagle_head: str | None = None,
    dtype: str = "bfloat16",
    seed: int = 0,
    warn=lambda m: print(m, file=sys.stderr),
    vision_options: dict | None = None,
):
    """None for 'none'; the drafter object otherwise (its `needs` tell what the target must give).
    `vision_options` override the fields of a vision preset's VisionConfig."""
    if name == "none":
        return None
    if name not in DRAFTER_NAMES:
        raise ConfigError(f"--drafter {name!r} is not one of {['none', *DRAFTER_NAMES]}")
    vision = vision_config(name, vision_options)
    if name in LOOKUP_DRAFTERS:
        return lookup_drafters(name, {})()
    if name == "draft_model":
        if not draft_model:
            raise ConfigError("--drafter draft_model needs --draft-model PATH (a Hugging Face folder)")
        lm, tok = load_model(draft_model, dtype)
        if tok is not None and target.tokenizer is not None:
            check_shared_vocabulary(target.tokenizer.get_vocab(), tok.get_vocab(), f"--draft-model {draft_model}")
        elif lm.config.vocab_size != target.model.config.vocab_size:
            raise ConfigError(
                f"--draft-model {draft_model}: vocabulary size {lm.config.vocab_size} differs from "
                f"the target's {target.model.config.vocab_size}"
            )
        return DraftModelDrafter(HFTreeLM(lm))
    m = target.model
    text_config = m.config.get_text_config()
    embed, lm_head = m.get_input_embeddings().weight, m.get_output_embeddings().weight
    eagle_head = eagle_head or shipped_head(target.name)
    if eagle_head:
        head = EagleHead.load(eagle_head, embed, lm_head, text_config.num_hidden_layers)
    else:
        warn(
            "sagespec: no --eagle-head given and none ships for this model yet: using a randomly initialised "
            "head (drafts will rarely be accepted; output is unaffected)"
        )
        head = EagleHead.random(EagleHeadConfig.for_target(text_config), embed, lm_head, seed=seed)
    if name == "eagle":
        return EagleDrafter(head.eval())
    modules = VisionModules.load_or_init(eagle_head, vision, head.config.hidden_size, seed=seed)
    drafter = VisionDrafter(head.eval(), vision, modules)
    drafter.name = name
    return drafter


def vision_config(drafter: str, options: dict | None) -> VisionConfig | None:
    """A vision drafter's settings: its preset with `options` applied; None for other drafters."""
    if drafter not in VISION_PRESETS:
        if options:
            raise ConfigError(f"vision options are for the vision drafters {list(VISION_PRESETS)}, not {drafter!r}")
        return None
    return VisionConfig.from_dict({**VISION_PRESETS[drafter].__dict__, **dict(options or {})})


def make_policy_from_args(name: str, budget: int | None):
    if name not in POLICIES:
        raise ConfigError(f"--policy {name!r} is not one of {sorted(POLICIES)}")
    if budget is not None:
        check_int("--budget", "budget", budget, 1, 1024)
        return make_policy(name, budget=budget)
    return make_policy(name)


def policy_budget(policy) -> int:
    """The most nodes a policy's trees hold (the ceiling cost-aware sizing works under)."""
    return policy.plan(DecodeState()).budget


def make_generator(
    target: LoadedTarget,
    drafter,
    policy,
    acceptance: str = "auto",
    acceptance_options: dict | None = None,
    strict_multimodal: bool = False,
    sizer: Sizer | None = None,
) -> SpeculativeGenerator:
    """Acceptance options are checked against the target (a judge's hidden size) before any request."""
    cfg = target.model.config.get_text_config()
    check_acceptance(acceptance, dict(acceptance_options or {}), cfg.vocab_size, cfg.hidden_size)
    layers = drafter.needs.hidden_layer_ids if drafter is not None else ()
    return SpeculativeGenerator(
        HFTreeLM(target.model, hidden_layer_ids=layers),
        drafter,
        policy,
        acceptance=acceptance,
        acceptance_options=acceptance_options,
        eos_token_ids=target.eos_ids(),
        strict_multimodal=strict_multimodal,
        sizer=sizer,
    )
