"""AutoJudge mining: which draft/target mismatches change a task's outcome.

For one prompt with the target's greedy response, walk the response left to right; at each
position where the drafter's greedy guess differs from the response, swap the guess in and let
the target regenerate the rest. If the task's outcome flips the token is important (label 1) and
the original token is kept; otherwise it is not (label 0) and the swapped response is kept, so
later mismatches are judged on the text a lossy decoder would actually have produced
(semi-greedy search). Each mismatch costs one target regeneration, except where the response
before it already settles the outcome: no swap there can flip it, so it is labelled unimportant
without regenerating and the response is left as it is.

The search is written over four callables, so the same code mines a real model and a planted
test task:
  draft_all(ids) -> [int]              the drafter's greedy guess of ids[j] from ids[:j] for every
                                       j (-1 where it has none); one call per response version
  regenerate(ids, max_new, until=None) -> [int]
                                       the target's greedy continuation (may stop early at EOS,
                                       or as soon as until(continuation so far) holds)
  hidden_at(ids) -> Tensor[H]          the target's last hidden state at ids[-1] (the draft token)
  correct(response_ids) -> bool        the task's outcome for a response
  settled(response_ids) -> bool        optional: every continuation of this prefix has its outcome
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch


@dataclass
class MinedMismatch:
    position: int  # index in the response where the draft differed
    target_token: int
    draft_token: int
    important: bool  # swapping the draft token in flipped the outcome
    hidden: torch.Tensor  # the target's last hidden state at the draft token [H]


@dataclass
class MinedPrompt:
    prompt: list[int]
    response: list[int]  # the target's greedy response
    final: list[int]  # the response after every unimportant swap was kept
    correct: bool  # the outcome of the target's own response
    mismatches: list[MinedMismatch]


def mine_prompt(
    prompt: list[int],
    response: list[int],
    draft_all: Callable[[list[int]], Iterable[int]],
    regenerate: Callable[..., Iterable[int]],
    hidden_at: Callable[[list[int]], torch.Tensor],
    correct: Callable[[list[int]], bool],
    max_new_tokens: int,
    settled: Callable[[list[int]], bool] | None = None,
) -> MinedPrompt:
    base = bool(correct(response))
    current = list(response)
    found: list[MinedMismatch] = []
    guesses = list(draft_all(prompt + current))
    t = 0
    while t < len(current):
        guess = int(guesses[len(prompt) + t])
        if guess < 0 or guess == current[t]:
            t += 1
            continue
        hidden = hidden_at(prompt + current[:t] + [guess])
        if settled is not None and settled(current[:t]):
            found.append(MinedMismatch(t, current[t], guess, False, hidden))
            t += 1
            continue
        swapped = _swap(prompt, current[:t] + [guess], regenerate, max_new_tokens, settled)
        flipped = bool(correct(swapped)) != base
        if not flipped and settled is not None and settled(swapped):
            # regeneration stopped once the outcome settled; the rest only matters if kept
            swapped += list(regenerate(prompt + swapped, max_new_tokens - len(swapped)))
        found.append(MinedMismatch(t, current[t], guess, flipped, hidden))
        if not flipped:
            current = swapped
            guesses = list(draft_all(prompt + current))
        t += 1
    return MinedPrompt(list(prompt), list(response), current, base, found)


def _swap(
    prompt: list[int],
    swapped: list[int],
    regenerate: Callable[..., Iterable[int]],
    max_new_tokens: int,
    settled: Callable[[list[int]], bool] | None,
) -> list[int]:
    """The response with the swap in place, regenerated until it ends, fills the budget, or (when
    the task can tell) its outcome settles."""
    if settled is None:
        return swapped + list(regenerate(prompt + swapped, max_new_tokens - len(swapped)))
    if settled(swapped):
        return swapped
    return swapped + list(
        regenerate(prompt + swapped, max_new_tokens - len(swapped), until=lambda new: settled(swapped + list(new)))
    )
