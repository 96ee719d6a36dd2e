"""The prompts drafter training data is generated from, kept apart from every prompt set that
benchmarks and acceptance bars read.

Benchmarks read MT-Bench, HumanEval and ShareGPT's first conversations (every script takes at most
its first 1000). Training takes every human turn of ShareGPT's conversations from number
`HELD_OUT_SHAREGPT` on, as a one-turn prompt, and drops any whose text is an MT-Bench or HumanEval
prompt. The order is a seeded shuffle in which code-flavoured turns (a few percent of ShareGPT)
come three times as densely as elsewhere: all of them fall within the first 40%.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ..datasets import dataset_file, iter_sharegpt, load_user_turns

HELD_OUT_SHAREGPT = 2000  # ShareGPT conversations 0..1999 never feed training
MIN_CHARS, MAX_CHARS = 16, 2000
_CODE = re.compile(r"```|\bdef |\bclass |\bimport |\bfunction\b|#include|\bSELECT\b|=>|;\s*$", re.MULTILINE)


@dataclass(frozen=True)
class TrainingPrompt:
    id: str  # "sharegpt/<conversation id>/<turn>"
    text: str
    code: bool  # code-flavoured (fences, definitions, imports, statements)


def _normalise(text: str) -> str:
    return " ".join(text.split()).lower()


def benchmark_texts() -> set[str]:
    """Normalised texts of every benchmark prompt (all MT-Bench and HumanEval turns)."""
    return {_normalise(t) for name in ("mt-bench", "humaneval") for turns in load_user_turns(name) for t in turns}


def training_prompts(limit: int | None = None, seed: int = 0) -> list[TrainingPrompt]:
    excluded = benchmark_texts()
    out = []
    for number, conv in enumerate(iter_sharegpt(dataset_file("sharegpt"))):
        if number < HELD_OUT_SHAREGPT:
            continue
        for turn, text in enumerate(conv["turns"][0::2]):
            text = text.strip()
            if MIN_CHARS <= len(text) <= MAX_CHARS and _normalise(text) not in excluded:
                out.append(TrainingPrompt(f"sharegpt/{conv['id']}/{turn}", text, bool(_CODE.search(text))))
    rng = random.Random(seed)
    keys = [rng.random() * (1 / 3 if p.code else 1) for p in out]
    out = [p for _, p in sorted(zip(keys, out), key=lambda kp: kp[0])]
    return out[:limit] if limit is not None else out
