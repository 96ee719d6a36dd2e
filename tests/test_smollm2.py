"""The real default model (SmolLM2-135M-Instruct, fp32): greedy identity for every drafter x policy
on MT-Bench prompts, against transformers' own greedy generate."""

import copy

import pytest
import torch
from tiny_models import tiny_llama

from sagespec.common.datasets import load_prompts
from sagespec.common.drafters import (
    LOOKUP_DRAFTERS,
    DraftModelDrafter,
    EagleDrafter,
    EagleHead,
    EagleHeadConfig,
    check_shared_vocabulary,
    lookup_drafters,
)
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES, make_policy
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

NUM_PROMPTS, NEW_TOKENS = 4, 64


@pytest.fixture(scope="module")
def prompts(smollm2_fp32):
    return [smollm2_fp32.encode_chat(p.text) for p in load_prompts("mt-bench", NUM_PROMPTS)]


@pytest.fixture(scope="module")
def oracle(smollm2_fp32, prompts):
    ref = copy.deepcopy(smollm2_fp32.model)
    ref.set_attn_implementation("sdpa")
    eos = smollm2_fp32.eos_ids()
    outs = []
    for ids in prompts:
        out = ref.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos, pad_token_id=eos[0]
        )
        outs.append(out[0, len(ids) :].tolist())
    return outs


def drafter_for(name, target):
    m = target.model
    if name in LOOKUP_DRAFTERS:
        return lookup_drafters(name, {})()
    if name == "draft_model":  # a small random draft over the same vocabulary
        return DraftModelDrafter(HFTreeLM(tiny_llama(vocab_size=m.config.vocab_size, layers=1, seed=5)))
    cfg = EagleHeadConfig.for_target(m.config)
    return EagleDrafter(EagleHead.random(cfg, m.model.embed_tokens.weight, m.lm_head.weight))


# Every policy with prompt lookup, whose drafts the real model accepts (so every tree path is
# walked); the model-fed drafters (random weights here) with SAGE trees. Every drafter x policy pair
# also runs on tiny models (test_runtime_tiny.py) and in the engine lanes.
IDENTITY_CASES = [("ngram", policy) for policy in sorted(POLICIES)] + [("draft_model", "sage"), ("eagle", "sage")]


@pytest.mark.slow
@pytest.mark.parametrize("drafter, policy", IDENTITY_CASES)
def test_greedy_identity_on_smollm2(smollm2_fp32, prompts, oracle, drafter, policy):
    d = drafter_for(drafter, smollm2_fp32)
    gen = SpeculativeGenerator(
        HFTreeLM(smollm2_fp32.model, hidden_layer_ids=d.needs.hidden_layer_ids),
        d,
        make_policy(policy),
        eos_token_ids=smollm2_fp32.eos_ids(),
    )
    drafted = 0
    for ids, expected in zip(prompts, oracle):
        res = gen.generate(ids, NEW_TOKENS)
        assert res.tokens == expected
        drafted += sum(res.nodes_per_step)
    assert drafted > 0


@pytest.mark.slow
def test_suffix_drafts_a_repeated_request_from_the_first_answer_on_smollm2(smollm2_fp32, prompts, oracle):
    gen = SpeculativeGenerator(
        HFTreeLM(smollm2_fp32.model),
        drafter_for("suffix", smollm2_fp32),
        make_policy("sage"),
        eos_token_ids=smollm2_fp32.eos_ids(),
    )
    first = [gen.generate(ids, NEW_TOKENS) for ids in prompts]
    again = [gen.generate(ids, NEW_TOKENS) for ids in prompts]  # every answer is in the cache now
    assert [r.tokens for r in first] == [r.tokens for r in again] == oracle
    tau_first = sum(len(r.tokens) for r in first) / sum(r.steps for r in first)
    tau_again = sum(len(r.tokens) for r in again) / sum(r.steps for r in again)
    assert tau_again > max(3.0, tau_first)


@pytest.mark.slow
def test_draft_with_another_tokenizer_is_refused(smollm2_fp32):
    vocab = smollm2_fp32.tokenizer.get_vocab()
    other = dict(vocab)
    other["hello-there"] = other.pop(next(iter(other)))
    with pytest.raises(ConfigError, match="tokenizer does not match"):
        check_shared_vocabulary(vocab, other)
    check_shared_vocabulary(vocab, dict(vocab))


@pytest.mark.slow
def test_shipped_head_loads_and_matches_its_manifest(smollm2_fp32):
    import hashlib
    import json

    from sagespec.common.shipped import shipped_head
    from sagespec.plugins.transformers.factory import make_drafter

    folder = shipped_head("smollm2")
    assert folder is not None
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == manifest["sha256"]
    drafter = make_drafter("eagle", smollm2_fp32, warn=pytest.fail)  # no random-head warning
    assert drafter.head.config.target_layer_ids == (2, 15, 27)
