"""Building a runtime from names: target model, drafter, policy, acceptance rule."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from sagespec.common.drafters import (
    CASCADE_SOURCES,
    DRAFTER_NAMES,
    LOOKUP_DRAFTERS,
    VISION_PRESETS,
    CascadeDrafter,
    DraftModelDrafter,
    DyTCRouter,
    EagleDrafter,
    EagleHead,
    EagleHeadConfig,
    MedusaDrafter,
    MedusaHeads,
    SelfDrafter,
    SelfLevel,
    VisionConfig,
    VisionDrafter,
    VisionModules,
    check_fractions,
    check_shared_vocabulary,
    lookup_drafters,
)
from sagespec.common.drafters.self_draft import DEFAULT_FRACTIONS
from sagespec.common.params import ConfigError, check_int
from sagespec.common.policies import POLICIES, DecodeState, make_policy
from sagespec.common.shipped import shipped_head, shipped_medusa
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
    self_levels: dict = field(default_factory=dict)  # calibrated self-draft levels by fractions

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
    medusa_heads: str | None = None,
    self_levels: tuple[float, ...] = DEFAULT_FRACTIONS,
    cascade_sources: tuple[str, ...] = ("self", "ngram"),
):
    """None for 'none'; the drafter object otherwise (its `needs` tell what the target must give).
    `vision_options` override the fields of a vision preset's VisionConfig. `self_levels`: the
    shares of layers each self-draft level skips; `cascade_sources`: what `cascade` routes among."""
    if name == "none":
        return None
    if name not in DRAFTER_NAMES:
        raise ConfigError(f"--drafter {name!r} is not one of {['none', *DRAFTER_NAMES]}")
    vision = vision_config(name, vision_options)
    if name in LOOKUP_DRAFTERS:
        return lookup_drafters(name, {})()
    if name == "medusa":
        return MedusaDrafter(load_medusa(target, medusa_heads))
    if name == "self":
        return SelfDrafter(calibrated_levels(target, self_levels), _text_config(target).num_hidden_layers)
    if name == "cascade":
        return make_cascade(target, cascade_sources, medusa_heads, self_levels)
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


def _text_config(target: LoadedTarget):
    return target.model.config.get_text_config()


def load_medusa(target: LoadedTarget, folder: str | None) -> MedusaHeads:
    """The heads at `folder`, or the ones that ship for the target; a ConfigError otherwise."""
    folder = folder or shipped_medusa(target.name)
    if not folder:
        raise ConfigError(
            f"drafter 'medusa' needs --medusa-heads DIR: no heads ship for {target.name!r} "
            "(train some with: sagespec train-drafter --drafter medusa --out DIR)"
        )
    cfg = _text_config(target)
    return MedusaHeads.load(folder, target.model.get_output_embeddings().weight, cfg.num_hidden_layers)


def calibrated_levels(target: LoadedTarget, fractions: tuple[float, ...]) -> list[SelfLevel]:
    """The self-draft levels for these fractions, calibrated once per loaded target: agreement on
    the target's greedy continuations of two MT-Bench and two HumanEval prompts (or, for a model
    without a tokenizer, of fixed token prompts), cost by timed forwards."""
    from sagespec.plugins.transformers.self_calibration import calibrate_self, greedy_continuations

    fractions = check_fractions(fractions, "--self-levels")
    if fractions not in target.self_levels:
        if target.tokenizer is not None:
            from sagespec.common.datasets import load_prompts

            texts = [p.text for name in ("mt-bench", "humaneval") for p in load_prompts(name, 2)]
            prompts = [target.encode_chat(t) for t in texts]
        else:
            vocab = _text_config(target).vocab_size
            prompts = [[(7 * i + j) % vocab for j in range(16)] for i in range(4)]
        continuations = greedy_continuations(target.model, prompts, CALIBRATION_TOKENS)
        levels = calibrate_self(HFTreeLM(target.model), continuations, fractions)
        print(
            "[self-draft levels: "
            + "; ".join(f"skip {len(lv.skip)}: agreement {lv.agreement:.2f}, cost {lv.cost:.2f}" for lv in levels)
            + "]",
            file=sys.stderr,
        )
        target.self_levels[fractions] = levels
    return target.self_levels[fractions]


CALIBRATION_TOKENS = 48


def check_cascade_sources(sources: tuple[str, ...]) -> None:
    unknown = [s for s in sources if s not in CASCADE_SOURCES]
    if unknown or not sources or len(set(sources)) != len(sources):
        raise ConfigError(f"--cascade-sources {','.join(sources)}: each source once, from {list(CASCADE_SOURCES)}")


def make_cascade(
    target: LoadedTarget, sources: tuple[str, ...], medusa_heads: str | None, self_levels: tuple[float, ...]
) -> CascadeDrafter:
    """A DyTC cascade over `sources` (each self level is a source of its own)."""
    unknown = [s for s in sources if s not in CASCADE_SOURCES]
    if unknown or not sources or len(set(sources)) != len(sources):
        raise ConfigError(f"--cascade-sources {','.join(sources)}: each source once, from {list(CASCADE_SOURCES)}")
    lookup = {s: lookup_drafters(s, {})() for s in sources if s in LOOKUP_DRAFTERS}
    models, priors = {}, {}
    if "self" in sources:
        layers = _text_config(target).num_hidden_layers
        for level in calibrated_levels(target, self_levels):
            models[level.name] = SelfDrafter([level], layers)
            priors[level.name] = level.agreement
    if "medusa" in sources:
        models["medusa"] = MedusaDrafter(load_medusa(target, medusa_heads))
    return CascadeDrafter(lookup, models, DyTCRouter(tuple(lookup), tuple(models), priors))


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
    tree_lm = HFTreeLM(target.model, hidden_layer_ids=layers)
    if hasattr(drafter, "bind_target"):  # drafters that draft with the target itself
        drafter.bind_target(tree_lm)
    return SpeculativeGenerator(
        tree_lm,
        drafter,
        policy,
        acceptance=acceptance,
        acceptance_options=acceptance_options,
        eos_token_ids=target.eos_ids(),
        strict_multimodal=strict_multimodal,
        sizer=sizer,
    )
