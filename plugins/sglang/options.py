"""`--speculative-algorithm sage`: SGLang's own flags where they mean the same, plus one JSON
option for the rest, validated when SGLang resolves its server arguments.

  --speculative-num-draft-tokens N   tokens per verify, SGLang's sense: the root plus N-1 drafted
                                     nodes, so the tree policy's node budget is N-1
  --speculative-num-steps D          the deepest tree (the policy's max_depth / depth)
  --speculative-eagle-topk W         the widest tree level (the policy's max_width / width)
  --speculative-draft-model-path P   a draft model, or with drafter 'eagle' a head folder
  --speculative-adaptive-config J    JSON text or a JSON file: drafter, policy, policy_options,
                                     drafter_options, acceptance

SGLang's `--speculative-adaptive` (a step-count controller for its EAGLE worker) is refused: sage
chooses the whole tree shape every step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sagespec.common.drafters import LOOKUP_DRAFTERS, check_lookup_options
from sagespec.common.params import ConfigError, check_choice, check_int, reject_unknown
from sagespec.common.policies import POLICIES, make_policy
from sagespec.common.verify import is_lossless
from sagespec.common.verify.acceptance import parse_server_acceptance

OWNER = "--speculative-algorithm sage"
CONFIG_FLAG = "--speculative-adaptive-config"
DRAFTERS = (*LOOKUP_DRAFTERS, "draft_model", "eagle")
# Drafters the SGLang worker does not run yet, and why (they run in vLLM and the reference runtime).
NOT_IN_SGLANG = {
    "medusa": "reads the target's final hidden states, which the SGLang worker does not capture yet "
    "(it captures EAGLE's layers only); use it with vLLM or the reference runtime",
    "self": "runs the target with layers skipped, which the SGLang worker does not do yet; it runs in the "
    "reference runtime",
    "cascade": "routes among sources the SGLang worker does not run yet (self levels, Medusa heads); use it "
    "with vLLM or the reference runtime",
}
JSON_KEYS = ("drafter", "policy", "policy_options", "drafter_options", "acceptance")
DEFAULT_DRAFT_TOKENS = 9  # root + 8 drafted nodes, the vLLM plugin's default budget
MAX_DRAFT_TOKENS = 65
# Which SGLang flag sets which option of each policy; those options may not come from the JSON too.
FLAG_OPTIONS = {
    "sage": {"budget": "num_draft_tokens", "max_depth": "num_steps", "max_width": "eagle_topk"},
    "dynamic": {"budget": "num_draft_tokens", "depth": "num_steps", "width": "eagle_topk"},
    "chain": {"depth": "num_steps"},
    "static": {"budget": "num_draft_tokens"},
}


@dataclass(frozen=True)
class SageOptions:
    drafter: str = "ngram"
    model: str | None = None  # draft model or EAGLE head folder (eagle default: shipped head)
    num_draft_tokens: int = DEFAULT_DRAFT_TOKENS
    num_steps: int = DEFAULT_DRAFT_TOKENS - 1
    eagle_topk: int = DEFAULT_DRAFT_TOKENS - 1
    policy: str = "sage"
    policy_options: dict = field(default_factory=dict)
    drafter_options: dict = field(default_factory=dict)
    acceptance: str = "auto"
    acceptance_options: dict = field(default_factory=dict)

    @property
    def budget(self) -> int:
        """Drafted nodes per tree (the verify's tokens less the root)."""
        return self.num_draft_tokens - 1

    @property
    def lossless(self) -> bool:
        return is_lossless(self.acceptance)

    def policy_kwargs(self) -> dict:
        values = {"num_draft_tokens": self.budget, "num_steps": self.num_steps, "eagle_topk": self.eagle_topk}
        return {**self.policy_options, **{key: values[flag] for key, flag in FLAG_OPTIONS.get(self.policy, {}).items()}}

    def make_policy(self):
        return make_policy(self.policy, **self.policy_kwargs())


def read_config_json(value) -> dict:
    """The JSON option: inline text or the path of a file holding it."""
    if value is None:
        return {}
    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise ConfigError(f"{OWNER}: {CONFIG_FLAG}={value!r} is neither a JSON object nor a file")
        text = path.read_text()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{OWNER}: {CONFIG_FLAG} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{OWNER}: {CONFIG_FLAG} must be a JSON object; got {type(config).__name__}")
    return config


def _dict_option(config: dict, key: str) -> dict:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{OWNER}: {CONFIG_FLAG} {key}={value!r} must be a JSON object")
    return dict(value)


def _flag(value, name: str, default: int, lo: int, hi: int) -> int:
    return default if value is None else check_int(OWNER, f"--speculative-{name.replace('_', '-')}", value, lo, hi)


def check_drafter_options(drafter: str, drafter_options: dict) -> None:
    if drafter not in LOOKUP_DRAFTERS:
        if drafter_options:
            raise ConfigError(f"{OWNER}: drafter {drafter!r} takes no drafter_options (got {sorted(drafter_options)})")
        return
    try:
        check_lookup_options(drafter, drafter_options)
    except ConfigError as e:
        raise ConfigError(f"{OWNER}: {CONFIG_FLAG} drafter_options: {e}") from None


def parse_server_args(cfg) -> SageOptions:
    """Our options from SGLang's server arguments (any object with its speculative_* fields).
    Raises ConfigError naming the flag or JSON key at fault."""
    if getattr(cfg, "speculative_adaptive", False):
        raise ConfigError(
            f"{OWNER}: --speculative-adaptive is SGLang's step-count controller for EAGLE; "
            f"sage adapts the whole tree each step, so drop it (policy options go in {CONFIG_FLAG})"
        )
    config = read_config_json(getattr(cfg, "speculative_adaptive_config", None))
    reject_unknown(f"{OWNER}: {CONFIG_FLAG}", config, JSON_KEYS)
    model = getattr(cfg, "speculative_draft_model_path", None)
    if config.get("drafter") in NOT_IN_SGLANG:
        raise ConfigError(f"{OWNER}: drafter {config['drafter']!r} {NOT_IN_SGLANG[config['drafter']]}")
    drafter = check_choice(OWNER, "drafter", config.get("drafter", "draft_model" if model else "ngram"), DRAFTERS)
    if drafter == "draft_model" and not model:
        raise ConfigError(f"{OWNER}: drafter 'draft_model' needs --speculative-draft-model-path")
    if drafter in LOOKUP_DRAFTERS and model:
        raise ConfigError(f"{OWNER}: drafter {drafter!r} takes no --speculative-draft-model-path (got {model!r})")
    tokens = _flag(
        getattr(cfg, "speculative_num_draft_tokens", None),
        "num_draft_tokens",
        DEFAULT_DRAFT_TOKENS,
        2,
        MAX_DRAFT_TOKENS,
    )
    steps = _flag(getattr(cfg, "speculative_num_steps", None), "num_steps", tokens - 1, 1, tokens - 1)
    topk = _flag(getattr(cfg, "speculative_eagle_topk", None), "eagle_topk", tokens - 1, 1, tokens - 1)
    policy = check_choice(OWNER, "policy", config.get("policy", "sage"), tuple(POLICIES))
    policy_options = _dict_option(config, "policy_options")
    for key, flag in FLAG_OPTIONS.get(policy, {}).items():
        if key in policy_options:
            raise ConfigError(
                f"{OWNER}: policy_options.{key} is set by --speculative-{flag.replace('_', '-')}; "
                f"remove it from {CONFIG_FLAG}"
            )
    drafter_options = _dict_option(config, "drafter_options")
    check_drafter_options(drafter, drafter_options)
    acceptance, acceptance_options = parse_server_acceptance(config.get("acceptance", "auto"), OWNER)
    options = SageOptions(
        drafter=drafter,
        model=model,
        num_draft_tokens=tokens,
        num_steps=steps,
        eagle_topk=topk,
        policy=policy,
        policy_options=policy_options,
        drafter_options=drafter_options,
        acceptance=acceptance,
        acceptance_options=acceptance_options,
    )
    try:
        options.make_policy()  # a bad policy option fails now, named
    except ConfigError as e:
        flags = "; ".join(
            f"{k} comes from --speculative-{f.replace('_', '-')}" for k, f in FLAG_OPTIONS.get(policy, {}).items()
        )
        raise ConfigError(f"{OWNER}: {e}" + (f" ({flags})" if flags else "")) from None
    return options
