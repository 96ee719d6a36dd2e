"""Tasks whose outcome a program checks, for mining AutoJudge labels and measuring lossy
acceptance: templated single-digit arithmetic (SmolLM2-135M-Instruct answers about two thirds of
additions right, so swapped tokens flip outcomes often enough to be informative).

Splits are fixed by the operand pair (a hash, not the order of generation), so no pair is both
trained on and tested on."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from .params import ConfigError

SPLITS = ("train", "validation", "test")
TEMPLATES = (
    "What is {a} {op} {b}? Answer with the number only.",
    "What is {a} {op} {b}?",
    "Compute {a} {op} {b}.",
    "{a} {op} {b} = ?",
)


@dataclass(frozen=True)
class TaskItem:
    id: str
    question: str
    answer: str


def split_of(key: str) -> str:
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 6 else "validation" if bucket < 8 else "test"


def arithmetic_items(split: str) -> list[TaskItem]:
    if split not in SPLITS:
        raise ConfigError(f"task split {split!r} is not one of {list(SPLITS)}")
    items = []
    for a in range(1, 10):
        for b in range(1, 10):
            for op in ("+", "-"):
                if op == "-" and b > a:
                    continue
                key = f"{a}{op}{b}"
                if split_of(key) != split:
                    continue
                answer = str(a + b if op == "+" else a - b)
                for i, tpl in enumerate(TEMPLATES):
                    items.append(TaskItem(f"{key}#{i}", tpl.format(a=a, b=b, op=op), answer))
    return items


def stated_answer(text: str) -> str | None:
    """The integer the response states: the first after its first '=' (worked answers such as
    '3 + 4 = 7. Next, ...'), else its first integer (bare answers such as '7')."""
    after = text.split("=", 1)[1] if "=" in text else text
    nums = re.findall(r"-?\d+", after)
    return nums[0] if nums else None


def arithmetic_correct(item: TaskItem, text: str) -> bool:
    return stated_answer(text) == item.answer


def arithmetic_settled(text: str) -> bool:
    """True when no continuation of `text` can change its stated answer: an integer after the
    first '=' already ended (a later character that is not a digit follows it)."""
    return "=" in text and re.search(r"-?\d+\D", text.split("=", 1)[1]) is not None


class Task(NamedTuple):
    items: Callable[[str], list[TaskItem]]  # split -> its items
    correct: Callable[[TaskItem, str], bool]  # the outcome of a response text
    settled: Callable[[str], bool]  # the outcome of every continuation is that of the text


TASKS = {"arithmetic": Task(arithmetic_items, arithmetic_correct, arithmetic_settled)}
