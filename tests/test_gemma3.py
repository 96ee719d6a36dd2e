"""The second real model, Gemma 3 270M (fp32): sliding-window attention (window 512 in 15 of 18
layers), head_dim 256, a 262k vocabulary. Greedy output with SAGE trees and chains equals
transformers' own generate, on a code prompt longer than the window and a short question."""

import copy

import pytest
import torch

from sagespec.common.datasets import load_prompts
from sagespec.common.drafters import NgramDrafter
from sagespec.common.policies import make_policy
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.model_loading import GEMMA3, load_model
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

NEW_TOKENS = 32


@pytest.fixture(scope="module")
def gemma3():
    model, tokenizer = load_model(GEMMA3, "float32")
    assert model.config.sliding_window == 512 and "sliding_attention" in model.config.layer_types
    return model, tokenizer


@pytest.fixture(scope="module")
def prompts(gemma3):
    _, tok = gemma3
    code = "\n".join(p.text for p in load_prompts("humaneval", 6))
    long = tok(code)["input_ids"]
    assert len(long) > 600  # past the 512-token window before generation starts
    return [long, tok(load_prompts("mt-bench", 1)[0].text)["input_ids"]]


@pytest.fixture(scope="module")
def oracle(gemma3, prompts):
    ref = copy.deepcopy(gemma3[0])  # the model's own attention and sliding-window cache
    ref.set_attn_implementation("sdpa")
    return [
        ref.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)[
            0, len(ids) :
        ].tolist()
        for ids in prompts
    ]


@pytest.mark.parametrize("policy", ["sage", "chain"])
def test_gemma3_greedy_identity_past_the_window(gemma3, prompts, oracle, policy):
    target = HFTreeLM(gemma3[0])
    for ids, want in zip(prompts, oracle):
        res = SpeculativeGenerator(target, NgramDrafter(), make_policy(policy)).generate(ids, NEW_TOKENS)
        assert res.tokens == want
    assert max(res.nodes_per_step) > 1 or policy == "chain"
