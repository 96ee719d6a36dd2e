"""The vLLM plugin's view of one step (no engine): each request's rows of sampled tokens, features
and entropies cut from vLLM's flat batch."""

import math
from types import SimpleNamespace

import pytest
import torch

from sagespec.common.sampling import entropy
from sagespec.plugins.vllm.step_view import build_step_view


def test_step_view_cuts_rows_per_request():
    # Three requests: a prefill of 5 tokens (no drafts), a decode with 3 drafts of which 2 were
    # accepted (3 tokens sampled), and a partial prefill chunk of 4 (nothing sampled).
    sampled = [[11], [21, 22, 23], []]
    spec = SimpleNamespace(num_draft_tokens=[0, 3, 0])
    attn = SimpleNamespace(query_start_loc_cpu=torch.tensor([0, 5, 9, 13]), seq_lens=torch.tensor([5, 24, 4]))
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
    inf = float("inf")
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, -inf, -inf, -inf], [0.0, 0.0, -inf, -inf]])
    assert entropy(logits).tolist() == pytest.approx([math.log(4.0), 0.0, math.log(2.0)])
