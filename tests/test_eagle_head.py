"""EAGLE head checkpoints: round trip, identical logits, refusal of heads built for another target."""

import json

import pytest
import torch
from tiny_models import head_pass_logits, tiny_llama

from sagespec.common.drafters import EagleHead, EagleHeadConfig
from sagespec.common.params import ConfigError


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0)


def head_for(target, **kw):
    cfg = EagleHeadConfig.for_target(target.config, **kw)
    return EagleHead.random(cfg, target.model.embed_tokens.weight, target.lm_head.weight, seed=2)


@pytest.mark.parametrize(
    "kw", [{}, {"target_layer_ids": (0, 1, 2), "draft_vocab_size": 40}], ids=["eagle1", "eagle3-reduced-vocab"]
)
def test_save_load_round_trip(tmp_path, target, kw):
    head = head_for(target, **kw)
    head.save(tmp_path)
    loaded = EagleHead.load(
        tmp_path, target.model.embed_tokens.weight, target.lm_head.weight, target.config.num_hidden_layers
    )
    assert loaded.config == head.config
    torch.testing.assert_close(head_pass_logits(loaded), head_pass_logits(head), rtol=0, atol=0)


def test_mismatched_head_is_refused_naming_fields(tmp_path, target):
    head_for(target, target_layer_ids=(0, 7)).save(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["target_hidden_size"] = 123
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        EagleHead.load(tmp_path, target.model.embed_tokens.weight, target.lm_head.weight, 2)
    assert "target_hidden_size=123" in str(e.value) and "target_layer_ids=[0, 7]" in str(e.value)
    with pytest.raises(ConfigError, match=r"no config\.json"):
        EagleHead.load(tmp_path / "missing", target.model.embed_tokens.weight, target.lm_head.weight, 2)


def load_from(folder, target):
    return EagleHead.load(
        folder, target.model.embed_tokens.weight, target.lm_head.weight, target.config.num_hidden_layers
    )


def test_a_damaged_weights_file_is_named(tmp_path, target):
    head_for(target).save(tmp_path)
    weights = next(tmp_path.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ConfigError, match=f"{weights.name} is not a readable safetensors file"):
        load_from(tmp_path, target)


def test_a_draft_map_that_does_not_fit_the_target_is_named(tmp_path, target):
    from safetensors.torch import load_file, save_file

    head_for(target, draft_vocab_size=40).save(tmp_path)
    weights = next(tmp_path.glob("*.safetensors"))
    state = load_file(str(weights))
    state["d2t"] = torch.full_like(state["d2t"], 3)  # not distinct
    save_file(state, str(weights))
    with pytest.raises(ConfigError, match=r"d2t .* must hold 40 distinct target ids"):
        load_from(tmp_path, target)
    state["d2t"] = torch.arange(40) + target.config.vocab_size  # outside the vocabulary
    save_file(state, str(weights))
    with pytest.raises(ConfigError, match="d2t"):
        load_from(tmp_path, target)
    del state["d2t"]
    state["lm_head.weight"] = state["lm_head.weight"][:30]  # a map of another size
    save_file(state, str(weights))
    with pytest.raises(ConfigError, match=r"lm_head.weight \(30, .*\) \(config: \(40, "):
        load_from(tmp_path, target)
