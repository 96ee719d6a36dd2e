"""Judge files with random weights for tests (the format of common/verify/judge_file.py)."""

import json

import torch


def random_judge(path, hidden: int, seed: int = 0, **fields) -> str:
    """Writes a judge for `hidden`-sized rows to `path` (fields override the random ones) and
    returns the path as a string."""
    g = torch.Generator().manual_seed(seed)
    judge = dict(
        format="sagespec-judge/1",
        hidden_size=hidden,
        feature="target_last_hidden_at_draft_token",
        mean=torch.randn(hidden, generator=g).tolist(),
        scale=(torch.rand(hidden, generator=g) + 0.5).tolist(),
        weights=torch.randn(hidden, generator=g).tolist(),
        bias=0.0,
        thresholds={"q50": 0.5},
        provenance={"note": "random, for tests"},
    )
    judge.update(fields)
    path.write_text(json.dumps(judge))
    return str(path)
