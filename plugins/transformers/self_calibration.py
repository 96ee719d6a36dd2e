"""Calibrating self-speculative levels on a Hugging Face target: agreement by teacher forcing on
the target's own greedy continuations, cost by timing one-token forwards after a cached context."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
from tqdm import tqdm

from sagespec.common.drafters.self_draft import DEFAULT_FRACTIONS, SelfLevel, calibrate_levels
from sagespec.common.drafters.tree_lm import causal_extension_mask
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins._layer_skip import skipping_layers

COST_CONTEXT = 64  # cached tokens the timed forwards attend to
COST_REPEATS = 15  # one-token forwards are 15-60 ms here and jitter: 5 repeats moved a level's cost by 0.4


@torch.no_grad()
def greedy_continuations(model, prompts: Sequence[Sequence[int]], new_tokens: int) -> list[tuple[torch.Tensor, int]]:
    """(prompt + the target's greedy continuation, prompt length) per prompt: what drafts predict."""
    out = []
    for prompt in prompts:
        ids = torch.tensor([list(prompt)])
        gen = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, attention_mask=torch.ones_like(ids))
        out.append((gen[0], len(prompt)))
    return out


def agreement_on(model, texts: Sequence[tuple[torch.Tensor, int]]) -> Callable[[frozenset[int]], float]:
    """skip -> share of continuation positions where the skipping model's argmax is the full model's."""

    @torch.no_grad()
    def argmaxes(skip: frozenset[int]) -> list[torch.Tensor]:
        with skipping_layers(model, skip):
            return [model(input_ids=ids[None]).logits[0, start - 1 : -1].argmax(-1) for ids, start in texts]

    full = argmaxes(frozenset())

    def agreement(skip: frozenset[int]) -> float:
        same = sum(int((a == b).sum()) for a, b in zip(argmaxes(skip), full))
        return same / sum(a.numel() for a in full)

    return agreement


def forward_cost(lm: HFTreeLM) -> Callable[[frozenset[int]], float]:
    """skip -> median time of a one-token forward through the kept layers over the full one's."""

    @torch.no_grad()
    def seconds(skip: frozenset[int]) -> float:
        lm.truncate(0)
        lm.forward(
            torch.zeros(COST_CONTEXT, dtype=torch.long),
            torch.arange(COST_CONTEXT),
            causal_extension_mask(0, COST_CONTEXT),
        )
        times = []
        for _ in range(COST_REPEATS + 1):  # the first run warms up
            start = time.perf_counter()
            lm.forward_skipping(
                torch.zeros(1, dtype=torch.long),
                torch.tensor([COST_CONTEXT]),
                causal_extension_mask(COST_CONTEXT, 1),
                skip,
            )
            times.append(time.perf_counter() - start)
            lm.truncate(COST_CONTEXT)
        lm.truncate(0)
        return statistics.median(times[1:])

    full = seconds(frozenset())
    return lambda skip: seconds(skip) / full


def calibrate_self(
    lm: HFTreeLM,
    texts: Sequence[tuple[torch.Tensor, int]],
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    show_progress: bool = True,
) -> list[SelfLevel]:
    """The levels for this target: `texts` from `greedy_continuations`."""
    return calibrate_levels(
        lm.num_layers,
        agreement_on(lm.model, texts),
        forward_cost(lm),
        fractions,
        progress=lambda it: tqdm(list(it), desc="self-draft calibration: layers", disable=not show_progress),
    )
