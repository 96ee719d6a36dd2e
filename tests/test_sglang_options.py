"""The SGLang plugin's option parsing from server arguments and its torch slot assignment (SGLang not
imported)."""

import json
import sys
from types import SimpleNamespace

import pytest

from sagespec.common.params import ConfigError
from sagespec.plugins.sglang.options import DEFAULT_DRAFT_TOKENS, parse_server_args


def args(**kw):
    base = dict(
        speculative_num_draft_tokens=None,
        speculative_num_steps=None,
        speculative_eagle_topk=None,
        speculative_draft_model_path=None,
        speculative_adaptive_config=None,
        speculative_adaptive=False,
    )
    return SimpleNamespace(**{**base, **kw})


def test_defaults_fill_sglang_flags_and_the_policy():
    options = parse_server_args(args())
    assert (options.drafter, options.policy, options.acceptance) == ("ngram", "sage", "auto")
    assert (options.num_draft_tokens, options.num_steps, options.eagle_topk) == (
        DEFAULT_DRAFT_TOKENS,
        DEFAULT_DRAFT_TOKENS - 1,
        DEFAULT_DRAFT_TOKENS - 1,
    )
    policy = options.make_policy()
    assert (policy.budget, policy.max_depth, policy.max_width) == (8, 8, 8)
    assert "sglang" not in sys.modules  # parsing never imports the engine


def test_sglang_flags_become_the_policy_bounds():
    options = parse_server_args(
        args(speculative_num_draft_tokens=12, speculative_num_steps=6, speculative_eagle_topk=3)
    )
    policy = options.make_policy()
    assert (policy.budget, policy.max_depth, policy.max_width) == (11, 6, 3)  # the root is not drafted
    chain = parse_server_args(args(speculative_num_steps=4, speculative_adaptive_config='{"policy": "chain"}'))
    assert chain.make_policy().depth == 4


def test_json_option_inline_or_from_a_file(tmp_path):
    config = {
        "drafter": "eagle",
        "policy": "sage",
        "policy_options": {"ema": 0.25},
        "acceptance": {"rule": "typical", "eps": 0.1},
    }
    inline = parse_server_args(args(speculative_adaptive_config=json.dumps(config)))
    path = tmp_path / "sage.json"
    path.write_text(json.dumps(config))
    from_file = parse_server_args(args(speculative_adaptive_config=str(path)))
    assert inline == from_file
    assert (inline.drafter, inline.acceptance, inline.acceptance_options) == ("eagle", "typical", {"eps": 0.1})
    assert inline.make_policy().ema == 0.25 and not inline.lossless


def test_a_draft_model_path_means_the_draft_model_drafter():
    options = parse_server_args(args(speculative_draft_model_path="/models/draft"))
    assert (options.drafter, options.model) == ("draft_model", "/models/draft")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"speculative_num_draft_tokens": 1}, "--speculative-num-draft-tokens=1 is out of range"),
        ({"speculative_num_steps": 9}, "--speculative-num-steps=9 is out of range"),
        ({"speculative_eagle_topk": 0}, "--speculative-eagle-topk=0 is out of range"),
        ({"speculative_adaptive": True}, "drop it"),
        ({"speculative_adaptive_config": '{"colour": "blue"}'}, "unknown option(s) ['colour']"),
        ({"speculative_adaptive_config": '{"policy": "widest"}'}, "policy='widest' is not one of"),
        ({"speculative_adaptive_config": '{"drafter": "medusa"}'}, "the SGLang worker does not capture yet"),
        ({"speculative_adaptive_config": '{"drafter": "self"}'}, "it runs in the reference runtime"),
        ({"speculative_adaptive_config": '{"drafter": "cascade"}'}, "routes among sources the SGLang worker"),
        (
            {"speculative_adaptive_config": '{"policy_options": {"max_depth": 3}}'},
            "policy_options.max_depth is set by --speculative-num-steps",
        ),
        ({"speculative_adaptive_config": '{"policy_options": {"ema": 2.0}}'}, "ema=2.0 is out of range"),
        ({"speculative_adaptive_config": '{"acceptance": "greedy"}'}, "use 'auto'"),
        ({"speculative_adaptive_config": '{"acceptance": "nope"}'}, "acceptance rule 'nope' is unknown"),
        ({"speculative_adaptive_config": '{"policy": '}, "is not valid JSON"),
        ({"speculative_adaptive_config": "[1, 2]"}, "neither a JSON object nor a file"),
        ({"speculative_adaptive_config": "/nonexistent/sage.json"}, "neither a JSON object nor a file"),
        ({"speculative_adaptive_config": '{"drafter": "draft_model"}'}, "needs --speculative-draft-model-path"),
        (
            {"speculative_draft_model_path": "/m", "speculative_adaptive_config": '{"drafter": "ngram"}'},
            "takes no --speculative-draft-model-path",
        ),
        ({"speculative_num_steps": 1}, "max_depth comes from --speculative-num-steps"),  # sage's min_depth is 2
        ({"speculative_adaptive_config": '{"drafter_options": {"max_ngram": 0}}'}, "drafter_options: "),
        ({"speculative_adaptive_config": '{"drafter_options": {"window": 3}}'}, "unknown option(s) ['window']"),
        (
            {
                "speculative_draft_model_path": "/m",
                "speculative_adaptive_config": '{"drafter_options": {"min_ngram": 1}}',
            },
            "drafter 'draft_model' takes no drafter_options",
        ),
    ],
)
def test_bad_values_fail_naming_the_flag_or_key(kw, message):
    with pytest.raises(ConfigError) as err:
        parse_server_args(args(**kw))
    assert message in str(err.value) and "--speculative-algorithm sage" in str(err.value)


def test_slot_assignment_writes_each_requests_range_in_order():
    import torch

    from sagespec.plugins.sglang.cpu_paths import assign_req_to_token_pool

    req_to_token = torch.zeros(4, 10, dtype=torch.int32)
    locs = torch.arange(100, 107)
    assign_req_to_token_pool(torch.tensor([2, 0]), req_to_token, torch.tensor([3, 0]), torch.tensor([6, 4]), locs, 2)
    assert req_to_token[2].tolist() == [0, 0, 0, 100, 101, 102, 0, 0, 0, 0]
    assert req_to_token[0].tolist() == [103, 104, 105, 106, 0, 0, 0, 0, 0, 0]
    assert not req_to_token[[1, 3]].any()


def test_batches_with_options_only_sglangs_sampler_applies_are_refused():
    from sagespec.plugins.sglang.request_options import unsupported_batch_options

    plain = SimpleNamespace(
        penalizer_orchestrator=SimpleNamespace(is_required=False),
        logit_bias=None,
        need_min_p_sampling=False,
        has_custom_logit_processor=False,
    )
    assert (
        unsupported_batch_options(SimpleNamespace(sampling_info=plain, has_grammar=False, return_logprob=False)) is None
    )
    penalised = SimpleNamespace(
        **{**vars(plain), "penalizer_orchestrator": SimpleNamespace(is_required=True), "logit_bias": object()}
    )
    message = unsupported_batch_options(
        SimpleNamespace(sampling_info=penalised, has_grammar=True, return_logprob=False)
    )
    assert "penalties" in message and "logit_bias" in message and "grammars" in message
