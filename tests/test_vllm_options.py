"""The vLLM plugin's option parsing and step bookkeeping (pure Python/torch; vLLM not imported)."""
import math
import sys
from types import SimpleNamespace

import pytest
import torch

from sagespec.common.params import ConfigError
from sagespec.plugins.vllm.options import DEFAULT_BUDGET, parse_sage_config
from sagespec.plugins.vllm.step_view import build_step_view


def test_defaults_and_kept_vllm_keys():
    options, kept = parse_sage_config({"method": "sage", "max_model_len": 512})
    assert (options.drafter, options.policy, options.budget, options.max_budget, options.acceptance) == \
        ("ngram", "sage", "auto", DEFAULT_BUDGET, "auto")
    assert kept == {"max_model_len": 512}
    assert options.make_policy().budget == DEFAULT_BUDGET   # auto sizes within the policy's whole budget


def test_budget_keys():
    fixed, _ = parse_sage_config({"method": "sage", "num_speculative_tokens": 12, "budget": 5})
    assert (fixed.max_budget, fixed.budget, fixed.auto, fixed.make_policy().budget) == (12, 5, False, 5)
    auto, _ = parse_sage_config({"method": "sage", "max_budget": 16})
    assert (auto.max_budget, auto.budget, auto.auto) == (16, "auto", True)
    assert "vllm" not in sys.modules  # parsing never imports the engine


@pytest.mark.parametrize("config, message", [
    ({"drafter": "medusa"}, "drafter='medusa' is not one of"),
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
    ({"drafter": "vispec", "drafter_options": {"keep": 0.5}}, "drafter_options: vision drafter: unknown option(s) ['keep']"),
    ({"drafter": "vision-prune", "drafter_options": {"keep_ratio": 2}}, "keep_ratio=2 (in (0, 1])"),
])
def test_bad_options_name_the_key(config, message):
    with pytest.raises(ConfigError) as err:
        parse_sage_config({"method": "sage", **config})
    assert message in str(err.value)


def test_vision_drafters_take_their_preset_with_overrides():
    options, _ = parse_sage_config({"method": "sage", "drafter": "vision-prune", "drafter_options": {"keep_ratio": 0.1},
                                    "strict_multimodal": True})
    assert (options.vision.compress, options.vision.keep_ratio, options.strict_multimodal) == ("prune", 0.1, True)
    assert options.to_dict()["strict_multimodal"] is True
    assert parse_sage_config({"method": "sage", "drafter": "vispec"})[0].vision.compress == "adaptor"
    assert parse_sage_config({"method": "sage", "drafter": "eagle"})[0].vision is None


def test_acceptance_rule_and_options_ride_on_the_options():
    options, _ = parse_sage_config({"method": "sage", "acceptance": {"rule": "kl-judge", "threshold": 0.7}})
    assert (options.acceptance, options.acceptance_options, options.lossless) == ("kl-judge", {"threshold": 0.7}, False)
    assert options.to_dict()["acceptance"] == {"rule": "kl-judge", "threshold": 0.7}
    assert parse_sage_config({"method": "sage"})[0].lossless


def test_step_view_cuts_rows_per_request():
    # Three requests: a prefill of 5 tokens (no drafts), a decode with 3 drafts of which 2 were
    # accepted (3 tokens sampled), and a partial prefill chunk of 4 (nothing sampled).
    sampled = [[11], [21, 22, 23], []]
    spec = SimpleNamespace(num_draft_tokens=[0, 3, 0])
    attn = SimpleNamespace(query_start_loc_cpu=torch.tensor([0, 5, 9, 13]),
                           seq_lens=torch.tensor([5, 24, 4]))
    feats = [torch.arange(13.0)[:, None], 100 + torch.arange(13.0)[:, None]]
    entropies = torch.tensor([0.1, 1.0, 1.1, 1.2, 1.3, 2.0])  # rows: 1 + 4 + 1
    view = build_step_view(["a", "b", "c"], sampled, entropies, spec, attn, feats)
    a, b, c = view.requests
    assert (a.start_position, b.start_position, c.start_position) == (0, 20, 0)
    assert a.committed_features[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert b.committed_features.tolist() == [[5, 105], [6, 106], [7, 107]]  # root + 2 accepted drafts
    assert c.committed_features[:, 0].tolist() == [9, 10, 11, 12]
    assert a.entropy == pytest.approx(0.1) and b.entropy == pytest.approx(1.2) and c.entropy is None


def test_entropy_of_rows_with_masked_logits():
    from sagespec.common.sampling import entropy
    inf = float("inf")
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, -inf, -inf, -inf], [0.0, 0.0, -inf, -inf]])
    assert entropy(logits).tolist() == pytest.approx([math.log(4.0), 0.0, math.log(2.0)])


def test_draft_mode_by_request_options():
    from sagespec.plugins.vllm.tree_step import draft_mode
    plain = dict(structured_outputs=None, logprobs=None, presence_penalty=0.0, frequency_penalty=0.0,
                 repetition_penalty=1.0, min_p=0.0, min_tokens=0, logit_bias=None, allowed_token_ids=None,
                 bad_words=None, thinking_token_budget=None)
    assert draft_mode(SimpleNamespace(temperature=0.0, **plain)) == "ours"
    assert draft_mode(SimpleNamespace(temperature=1.0, **plain)) == "ours"
    assert draft_mode(SimpleNamespace(temperature=0.0, **{**plain, "logprobs": 2})) == "vllm_chain"
    assert draft_mode(SimpleNamespace(temperature=0.7, **{**plain, "repetition_penalty": 1.1})) == "off"
    assert draft_mode(None) == "off"
    # vLLM 0.31 defaults `watermarking` to True; it matters only in an engine with a watermark.
    assert draft_mode(SimpleNamespace(temperature=0.0, watermarking=True, **plain)) == "ours"
    assert draft_mode(SimpleNamespace(temperature=0.0, watermarking=True, **plain), True) == "vllm_chain"
    assert draft_mode(SimpleNamespace(temperature=0.0, watermarking=False, **plain), True) == "ours"
    assert draft_mode(SimpleNamespace(temperature=1.0, watermarking=None, **plain), True) == "off"


def test_truncated_tree_is_a_tree():
    from sagespec.common.tree import DraftTree
    from sagespec.plugins.vllm.tree_step import truncate_tree
    tree = DraftTree.from_parents([9, 1, 2, 3, 4, 5], [-1, 0, 0, 1, 1, 2])
    cut = truncate_tree(tree, 4)
    assert cut.tokens.tolist() == [9, 1, 2, 3] and cut.parents.tolist() == [-1, 0, 0, 1]
    assert truncate_tree(tree, 6) is tree


def test_scheduled_prefix_stops_where_vllm_diverges():
    from sagespec.common.tree import DraftTree
    from sagespec.plugins.vllm.tree_step import scheduled_prefix
    tree = DraftTree.from_parents([9, 1, 2, 3, 4], [-1, 0, 0, 1, 2])
    assert scheduled_prefix(tree, [1, 2, 3, 4]).num_nodes == 5
    assert scheduled_prefix(tree, [1, 2]).num_nodes == 3        # vLLM cut the list
    assert scheduled_prefix(tree, [0, 0, 0, 0]).num_nodes == 1  # zeroed drafts: the root alone
    assert scheduled_prefix(tree, [-1, -1]).num_nodes == 1      # placeholders
