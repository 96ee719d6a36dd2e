"""`--speculative-config '{"method": "sage", ...}'`: our keys, validated before vLLM sees the config.

vLLM's own `SpeculativeConfig` forbids unknown keys, so the plugin takes its keys out, checks them
here (every error names the key and what is allowed), and hands vLLM a `custom_class` config whose
proposer is ours; the parsed options ride along on the config object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sagespec.common.drafters import LOOKUP_DRAFTERS, VISION_PRESETS, VisionConfig
from sagespec.common.params import ConfigError, check_choice, check_int, reject_unknown
from sagespec.common.policies import POLICIES, make_policy
from sagespec.common.verify import is_lossless
from sagespec.common.verify.acceptance import parse_server_acceptance

OWNER = "--speculative-config (method 'sage')"
DRAFTERS = (*LOOKUP_DRAFTERS, "draft_model", "eagle", "medusa", "cascade", *VISION_PRESETS)
# What a cascade routes among in vLLM (self-speculative levels run in the reference runtime only).
VLLM_CASCADE_SOURCES = (*LOOKUP_DRAFTERS, "medusa")
SAGE_KEYS = (
    "method",
    "drafter",
    "model",
    "num_speculative_tokens",
    "budget",
    "max_budget",
    "policy",
    "policy_options",
    "drafter_options",
    "acceptance",
    "strict_multimodal",
)
# vLLM keys that keep their meaning for our proposer and are handed on unchanged.
VLLM_KEYS = ("disable_by_batch_size", "max_model_len")
DEFAULT_BUDGET = 8  # the most drafted tokens per request and step (vLLM's num_speculative_tokens)
ATTRIBUTE = "sagespec_options"  # where the parsed options ride on vLLM's SpeculativeConfig


@dataclass(frozen=True)
class SageOptions:
    drafter: str = "ngram"
    model: str | None = None  # draft model folder, or EAGLE head folder (default: shipped)
    max_budget: int = DEFAULT_BUDGET  # most drafted tokens per step = vLLM's num_speculative_tokens
    budget: int | str = "auto"  # "auto": cost-aware sizing each step; a number: that many nodes
    policy: str = "sage"
    policy_options: dict = field(default_factory=dict)
    drafter_options: dict = field(default_factory=dict)
    acceptance: str = "auto"  # a rule of sagespec.common.verify; auto = greedy/exact per request
    acceptance_options: dict = field(default_factory=dict)
    strict_multimodal: bool = False  # refuse a text-only drafter for a model that takes images

    @property
    def vision(self) -> VisionConfig | None:
        """The vision drafter's settings (its preset with drafter_options applied), or None."""
        if self.drafter not in VISION_PRESETS:
            return None
        return VisionConfig.from_dict({**VISION_PRESETS[self.drafter].__dict__, **self.drafter_options})

    @property
    def lossless(self) -> bool:
        return is_lossless(self.acceptance)

    @property
    def auto(self) -> bool:
        return self.budget == "auto"

    def make_policy(self):
        return make_policy(self.policy, budget=self.max_budget if self.auto else self.budget, **self.policy_options)

    def to_dict(self) -> dict:
        return {
            "drafter": self.drafter,
            "model": self.model,
            "max_budget": self.max_budget,
            "budget": self.budget,
            "policy": self.policy,
            "policy_options": dict(self.policy_options),
            "drafter_options": dict(self.drafter_options),
            "acceptance": {"rule": self.acceptance, **self.acceptance_options}
            if self.acceptance_options
            else self.acceptance,
            "strict_multimodal": self.strict_multimodal,
        }


def _dict_option(config: dict, key: str) -> dict:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{OWNER}: {key}={value!r} must be a JSON object")
    return dict(value)


def cascade_sources(options: SageOptions) -> tuple[str, ...]:
    """drafter_options.sources of a cascade: each once, from VLLM_CASCADE_SOURCES (default: the
    lookup drafters; "medusa" reads `model`, or the heads that ship for the target)."""
    reject_unknown(f"{OWNER}: drafter_options", options.drafter_options, ("sources",))
    sources = options.drafter_options.get("sources", list(LOOKUP_DRAFTERS))
    if (
        not isinstance(sources, list)
        or not sources
        or len(set(map(str, sources))) != len(sources)
        or any(s not in VLLM_CASCADE_SOURCES for s in sources)
    ):
        extra = "; 'self' runs in the reference runtime only" if "self" in (sources or []) else ""
        raise ConfigError(
            f"{OWNER}: drafter_options.sources={sources!r} must list each source once, from "
            f"{list(VLLM_CASCADE_SOURCES)}{extra}"
        )
    return tuple(sources)


def parse_budgets(config: dict) -> tuple[int, int | str]:
    """(max_budget, budget): max_budget is vLLM's num_speculative_tokens (either name, not two values);
    budget is "auto" (the default) or a number of nodes up to max_budget."""
    given = {k: config[k] for k in ("num_speculative_tokens", "max_budget") if k in config}
    if len(given) == 2 and given["num_speculative_tokens"] != given["max_budget"]:
        raise ConfigError(
            f"{OWNER}: num_speculative_tokens={given['num_speculative_tokens']!r} and "
            f"max_budget={given['max_budget']!r} name the same limit; give one"
        )
    key, value = next(iter(given.items()), ("max_budget", DEFAULT_BUDGET))
    max_budget = check_int(OWNER, key, value, 1, 64)
    budget = config.get("budget", "auto")
    if budget != "auto":
        if isinstance(budget, (str, bool)) or not isinstance(budget, int):
            raise ConfigError(f'{OWNER}: budget={budget!r} must be "auto" or a number of nodes 1..{max_budget}')
        budget = check_int(OWNER, "budget", budget, 1, max_budget)
    return max_budget, budget


def parse_sage_config(config: dict) -> tuple[SageOptions, dict]:
    """(our options, the keys vLLM keeps). Raises ConfigError naming the bad key."""
    reject_unknown(OWNER, config, SAGE_KEYS + VLLM_KEYS)
    if config.get("drafter") == "self":
        raise ConfigError(
            f"{OWNER}: drafter 'self' (the target with layers skipped) runs in the reference runtime only; "
            "vLLM's plugin does not run the loaded target's layers for drafts yet: use 'medusa', or 'cascade' "
            f"with drafter_options.sources from {list(VLLM_CASCADE_SOURCES)}"
        )
    drafter = check_choice(OWNER, "drafter", config.get("drafter", "ngram"), DRAFTERS)
    model = config.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{OWNER}: model={model!r} must be a path")
    if drafter == "draft_model" and not model:
        raise ConfigError(f"{OWNER}: drafter 'draft_model' needs model: the draft model's folder")
    if drafter in LOOKUP_DRAFTERS and model:
        raise ConfigError(f"{OWNER}: drafter {drafter!r} takes no model (got {model!r})")
    max_budget, budget = parse_budgets(config)
    policy = check_choice(OWNER, "policy", config.get("policy", "sage"), tuple(POLICIES))
    policy_options = _dict_option(config, "policy_options")
    if "budget" in policy_options:
        raise ConfigError(
            f"{OWNER}: policy_options.budget is not allowed; the node budget is "
            f'budget ("auto" or a number) within max_budget'
        )
    acceptance, acceptance_options = parse_server_acceptance(config.get("acceptance", "auto"), OWNER)
    strict = config.get("strict_multimodal", False)
    if not isinstance(strict, bool):
        raise ConfigError(f"{OWNER}: strict_multimodal={strict!r} must be true or false")
    options = SageOptions(
        drafter=drafter,
        model=model,
        max_budget=max_budget,
        budget=budget,
        policy=policy,
        policy_options=policy_options,
        drafter_options=_dict_option(config, "drafter_options"),
        acceptance=acceptance,
        acceptance_options=acceptance_options,
        strict_multimodal=strict,
    )
    if drafter == "cascade":
        if "medusa" not in cascade_sources(options) and model:  # fail now on a bad source, naming it
            raise ConfigError(f"{OWNER}: drafter 'cascade' takes model (Medusa heads) only with source 'medusa'")
    elif drafter not in (*LOOKUP_DRAFTERS, *VISION_PRESETS) and options.drafter_options:
        raise ConfigError(
            f"{OWNER}: drafter {drafter!r} takes no drafter_options (got {sorted(options.drafter_options)})"
        )
    options.make_policy()  # fail now on a bad policy option, naming it
    try:
        _ = options.vision  # fail now on a bad vision option, naming it
    except ConfigError as e:
        raise ConfigError(f"{OWNER}: drafter_options: {e}") from None
    kept = {k: config[k] for k in VLLM_KEYS if k in config}
    return options, kept
