"""The vLLM plugin's entropies at each request's bonus row: rows copied before sampling, reduced
after it for the row the sampler emitted its last token from; other rows stay NaN."""

from types import SimpleNamespace

import torch

from sagespec.common.sampling import entropy
from sagespec.plugins.vllm.bonus_entropy import KeptRows, logits_row_starts


def drafted(num_draft_tokens):
    """vLLM's SpecDecodeMetadata fields the row starts read."""
    sampled = torch.tensor(num_draft_tokens) + 1
    return SimpleNamespace(num_draft_tokens=num_draft_tokens, cu_num_sampled_tokens=torch.cumsum(sampled, 0))


def test_row_starts_follow_the_drafts_of_each_request():
    assert logits_row_starts(3, None) == [0, 1, 2, 3]
    assert logits_row_starts(3, drafted([2, 0, 4])) == [0, 3, 4, 9]


def test_bonus_rows_only_and_copies_taken_before_sampling():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 50, generator=g) * 3
    expected = entropy(logits)
    starts = logits_row_starts(3, drafted([2, 0, 4]))
    kept = KeptRows.take(logits, starts, [0, 2])  # request 1 is verified elsewhere
    logits.mul_(0.0)  # the sampler may scale logits in place
    # request 0 emitted 2 tokens (bonus at its row 1), request 2 emitted all 5 (bonus at row 4)
    sampled = torch.tensor([[7, 8, -1, -1, -1], [3, -1, -1, -1, -1], [1, 2, 3, 4, 5]])
    out = torch.full((9,), float("nan"))
    kept.fill_bonus_entropies(out, sampled)
    filled = (~out.isnan()).nonzero().flatten().tolist()
    assert filled == [1, 8]
    torch.testing.assert_close(out[[1, 8]], expected[[1, 8]])


def test_no_requests_keeps_nothing():
    assert KeptRows.take(torch.zeros(2, 4), [0, 1, 2], []) is None
