"""Attention features beyond plain causal attention in the reference runtime: sliding windows
(Gemma 3, Gemma 2) and soft-capped scores (Gemma 2) give greedy output identical to the model's own
generate in trees and chains; a model whose attention cannot run through tree attention is refused
when it is loaded."""

import copy

import pytest
import torch
from tiny_models import tiny_bloom, tiny_gemma2, tiny_gemma3, tiny_gpt_oss

from sagespec.common.drafters import DraftModelDrafter, NgramDrafter
from sagespec.common.params import ConfigError
from sagespec.common.policies import make_policy
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

WINDOW = 8
PROMPT = [1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3, 4, 5, 7, 9, 5, 7, 9, 2, 6]  # longer than the window
NEW = 40
MODELS = {
    "gemma3": lambda seed: tiny_gemma3(sliding_window=WINDOW, seed=seed),
    "gemma2-softcap": lambda seed: tiny_gemma2(sliding_window=WINDOW, seed=seed),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def target_and_oracle(request):
    target = MODELS[request.param](0)
    stock = copy.deepcopy(target)  # the model's own attention, masks and sliding-window cache
    stock.set_attn_implementation("eager")
    out = stock.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    return request.param, target, out[0, len(PROMPT) :].tolist()


@pytest.mark.parametrize("policy", ["sage", "chain", "dynamic"])
@pytest.mark.parametrize("drafter", ["ngram", "draft_model", "self-draft"])
def test_greedy_identity_beyond_the_window(target_and_oracle, drafter, policy):
    name, target, oracle = target_and_oracle
    if drafter == "ngram":
        draft = NgramDrafter()
    else:  # another random model of the same kind, or the target itself (every draft accepted)
        draft = DraftModelDrafter(HFTreeLM(copy.deepcopy(target) if drafter == "self-draft" else MODELS[name](1)))
    res = SpeculativeGenerator(HFTreeLM(target), draft, make_policy(policy)).generate(PROMPT, NEW)
    assert res.tokens == oracle
    assert sum(res.nodes_per_step) > 0  # drafts were verified, not only root-only steps
    if drafter != "ngram":  # a model drafts every step: trees branch, and its own line is accepted
        assert max(res.nodes_per_step) > 1
    if drafter == "self-draft" and policy == "chain":
        assert res.mean_accepted_length > 2.0


def test_plain_decoding_beyond_the_window(target_and_oracle):
    _, target, oracle = target_and_oracle
    assert SpeculativeGenerator(HFTreeLM(target), None, None).generate(PROMPT, NEW).tokens == oracle


@pytest.mark.parametrize("make", [tiny_gemma3, tiny_gemma2], ids=["gemma3", "gemma2-softcap"])
def test_window_changes_the_output(make):
    """The identity above is not vacuous: the same weights without a window decode differently."""
    windowed, wide = make(sliding_window=WINDOW), make(sliding_window=512)
    outs = [SpeculativeGenerator(HFTreeLM(m), None, None).generate(PROMPT, NEW).tokens for m in (windowed, wide)]
    assert outs[0] != outs[1]


@pytest.mark.parametrize(
    "make,message",
    [(tiny_bloom, "BloomModel computes its own attention"), (tiny_gpt_oss, "layers.0.self_attn uses attention sinks")],
    ids=["alibi", "sinks"],
)
def test_attention_trees_cannot_reproduce_is_refused_at_load(make, message):
    with pytest.raises(ConfigError, match=message):
        HFTreeLM(make())
