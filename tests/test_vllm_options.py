"""The vLLM plugin's option parsing (pure Python; vLLM not imported)."""

import sys

import pytest

from sagespec.common.params import ConfigError
from sagespec.plugins.vllm.options import DEFAULT_BUDGET, cascade_sources, parse_sage_config


def test_defaults_and_kept_vllm_keys():
    options, kept = parse_sage_config({"method": "sage", "max_model_len": 512})
    assert (options.drafter, options.policy, options.budget, options.max_budget, options.acceptance) == (
        "ngram",
        "sage",
        "auto",
        DEFAULT_BUDGET,
        "auto",
    )
    assert kept == {"max_model_len": 512}
    assert options.make_policy().budget == DEFAULT_BUDGET  # auto sizes within the policy's whole budget


def test_cascade_sources():
    lookup, _ = parse_sage_config({"method": "sage", "drafter": "cascade"})
    assert cascade_sources(lookup) == ("ngram", "suffix")  # no trained weights by default
    heads, _ = parse_sage_config(
        {"method": "sage", "drafter": "cascade", "model": "heads", "drafter_options": {"sources": ["medusa", "ngram"]}}
    )
    assert cascade_sources(heads) == ("medusa", "ngram")


def test_budget_keys():
    fixed, _ = parse_sage_config({"method": "sage", "num_speculative_tokens": 12, "budget": 5})
    assert (fixed.max_budget, fixed.budget, fixed.auto, fixed.make_policy().budget) == (12, 5, False, 5)
    auto, _ = parse_sage_config({"method": "sage", "max_budget": 16})
    assert (auto.max_budget, auto.budget, auto.auto) == (16, "auto", True)
    assert "vllm" not in sys.modules  # parsing never imports the engine


@pytest.mark.parametrize(
    "config, message",
    [
        ({"drafter": "mirror"}, "drafter='mirror' is not one of"),
        ({"drafter": "self"}, "drafter 'self' (the target with layers skipped) runs in the reference runtime only"),
        ({"drafter": "cascade", "drafter_options": {"sources": ["ngram", "self"]}}, "'self' runs in the reference"),
        ({"drafter": "cascade", "drafter_options": {"sources": ["ngram", "ngram"]}}, "each source once"),
        ({"drafter": "cascade", "drafter_options": {"depth": 3}}, "unknown option(s) ['depth']"),
        ({"drafter": "cascade", "model": "heads"}, "takes model (Medusa heads) only with source 'medusa'"),
        ({"drafter": "medusa", "drafter_options": {"k": 2}}, "drafter 'medusa' takes no drafter_options"),
        ({"policy": "widest"}, "policy='widest' is not one of"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens=0 is out of range"),
        ({"colour": "blue"}, "unknown option(s) ['colour']"),
        ({"policy_options": {"budget": 4}}, "the node budget is budget"),
        ({"budget": "big"}, "budget='big' must be \"auto\" or a number of nodes 1..8"),
        ({"budget": 9}, "budget=9 is out of range; allowed: 1 <= budget <= 8"),
        ({"max_budget": 65}, "max_budget=65 is out of range"),
        ({"max_budget": 8, "num_speculative_tokens": 4}, "name the same limit; give one"),
        ({"policy_options": {"ema": 2.0}}, "ema=2.0 is out of range"),
        ({"policy_options": "deep"}, "policy_options='deep' must be a JSON object"),
        ({"drafter": "draft_model"}, "needs model"),
        ({"drafter": "ngram", "model": "x"}, "takes no model"),
        ({"acceptance": "yolo"}, "acceptance rule 'yolo' is unknown"),
        ({"acceptance": "greedy"}, "use 'auto'"),
        ({"acceptance": {"threshold": 0.2}}, "needs a 'rule' key"),
        ({"acceptance": {"rule": "auto", "eps": 0.1}}, "takes no options"),
        ({"strict_multimodal": "yes"}, "strict_multimodal='yes' must be true or false"),
        (
            {"drafter": "vispec", "drafter_options": {"keep": 0.5}},
            "drafter_options: vision drafter: unknown option(s) ['keep']",
        ),
        ({"drafter": "vision-prune", "drafter_options": {"keep_ratio": 2}}, "keep_ratio=2 (in (0, 1])"),
    ],
)
def test_bad_options_name_the_key(config, message):
    with pytest.raises(ConfigError) as err:
        parse_sage_config({"method": "sage", **config})
    assert message in str(err.value)


def test_vision_drafters_take_their_preset_with_overrides():
    options, _ = parse_sage_config(
        {"method": "sage", "drafter": "vision-prune", "drafter_options": {"keep_ratio": 0.1}, "strict_multimodal": True}
    )
    assert (options.vision.compress, options.vision.keep_ratio, options.strict_multimodal) == ("prune", 0.1, True)
    assert options.to_dict()["strict_multimodal"] is True
    assert parse_sage_config({"method": "sage", "drafter": "vispec"})[0].vision.compress == "adaptor"
    assert parse_sage_config({"method": "sage", "drafter": "eagle"})[0].vision is None


def test_acceptance_rule_and_options_ride_on_the_options():
    options, _ = parse_sage_config({"method": "sage", "acceptance": {"rule": "kl-judge", "threshold": 0.7}})
    assert (options.acceptance, options.acceptance_options, options.lossless) == ("kl-judge", {"threshold": 0.7}, False)
    assert options.to_dict()["acceptance"] == {"rule": "kl-judge", "threshold": 0.7}
    assert parse_sage_config({"method": "sage"})[0].lossless
