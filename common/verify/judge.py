"""The learned judge rule (AutoJudge; lossy): a drafted child the lossless test rejects is still
accepted when the judge's p(important | the target's last hidden state at that child) is below
`threshold`. The hidden states are the verify forward's own rows: no extra forward, one batched
matrix-vector product per step. threshold 0 accepts nothing extra: lossless output."""

from __future__ import annotations

from pathlib import Path

import torch

from ..params import ConfigError, reject_unknown
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .judge_file import JudgeFile, load_judge
from .lossy import extended_walk
from .registry import Accepted, register_rule

OWNER = "acceptance rule 'judge'"


@register_rule("judge", needs_hidden=True)
def verify_tree_judge(
    tree: DraftTree,
    target_logits: torch.Tensor,
    params: SamplingParams,
    rng: RandomSource,
    target_hidden: torch.Tensor | None = None,
    path: str | Path | JudgeFile | None = None,
    threshold: float | str | None = None,
    **options: object,
) -> Accepted:
    reject_unknown(OWNER, options, ("path", "threshold"))
    if path is None or threshold is None:
        raise ConfigError(
            f"{OWNER}: needs path (a judge file from `sagespec train-judge`) and threshold "
            f"(a number in [0, 1] or an operating point of the file)"
        )
    judge = load_judge(path)
    assert target_hidden is not None  # the registry passes it to rules registered with needs_hidden
    judge.check_hidden_size(int(target_hidden.shape[1]), OWNER)
    cut = judge.threshold(threshold, OWNER)
    p_important = judge.probability(target_hidden).tolist()
    return extended_walk(tree, target_logits, params, rng, lambda node, child: p_important[child] < cut)
