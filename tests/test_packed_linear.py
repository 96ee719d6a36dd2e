"""Packed projections: the same maps as the plain weights, and a head's drafting passes (no autograd)
equal its training passes and follow weight updates."""

import copy

import pytest
import torch
import torch.nn.functional as F
from tiny_models import head_pass_logits, tiny_llama

from sagespec.common.drafters import EagleHead, EagleHeadConfig
from sagespec.common.drafters.packed_linear import PackedLinear


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_fused_projections_equal_separate_linears(dtype, tol, rows):
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, 48, generator=g).to(dtype) for n in (32, 16, 16)]
    x = torch.randn(2, rows, 48, generator=g).to(dtype)
    packed = PackedLinear(weights)
    for got, w in zip(packed.split(x), weights):
        assert got.shape == (2, rows, w.shape[0])
        torch.testing.assert_close(got.float(), F.linear(x, w).float(), rtol=tol, atol=tol)


def test_drafting_pass_matches_training_pass_and_follows_updates():
    target = tiny_llama(seed=0)
    cfg = EagleHeadConfig.for_target(target.config, target_layer_ids=(0, 1, 2), draft_vocab_size=40)
    head = EagleHead.random(cfg, target.model.embed_tokens.weight, target.lm_head.weight, seed=2)
    with torch.no_grad():
        drafting = head_pass_logits(head)
    training = head_pass_logits(head)
    assert training.requires_grad and not drafting.requires_grad
    torch.testing.assert_close(drafting, training.detach(), rtol=1e-5, atol=1e-5)

    sibling = copy.copy(head)  # a per-request copy shares the packed weights
    with torch.no_grad():
        assert sibling._packed() is head._packed()
        head.up_proj.weight.mul_(2.0)  # an in-place update (an optimizer step) invalidates them
        updated = head_pass_logits(sibling)
    torch.testing.assert_close(updated, head_pass_logits(head).detach(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(updated, drafting)
