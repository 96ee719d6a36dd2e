"""The target's features over answer shards (scripts/make_training_answers.py): one batched prefill
per group of similar-length sequences, stored packed in bf16 (`PackedFeatures`), one feature shard
per answer shard, with a manifest. Resumes: shards already made are skipped."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from tqdm import tqdm

from sagespec.common.machine import machine_info
from sagespec.common.training.feature_shards import PackedFeatures, length_buckets
from sagespec.plugins.transformers.data.drafter_data import extract_features

FEATURES_NAME = "features-{stem}.pt"


def read_answers(path: Path, seq_len: int) -> tuple[list[list[int]], list[int]]:
    """(prompt + answer cut to seq_len, first answer position) for each line of an answer shard."""
    seqs, starts = [], []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        seq = (row["prompt"] + row["answer"])[:seq_len]
        if len(seq) > len(row["prompt"]) + 1:  # at least two answer tokens
            seqs.append(seq)
            starts.append(len(row["prompt"]))
    return seqs, starts


def build_feature_shards(
    model, answers: Path, out: Path, layer_ids, seq_len: int, batch_tokens: int = 4096, limit: int | None = None
) -> dict:
    """Feature shards for the answer shards of `answers` (the first `limit` of them) under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"shards": []}
    target_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    fixed = {"answers": str(answers), "layers": list(layer_ids), "seq_len": seq_len, "target_dtype": target_dtype}
    for key, value in fixed.items():
        if manifest.get(key, value) != value:
            raise ValueError(
                f"{out} holds features made with {key}={manifest[key]!r}, not {value!r}: use another folder"
            )
    manifest.update(fixed, store_dtype="bfloat16")
    made = {s["answers"] for s in manifest["shards"]}
    todo = [p for p in sorted(answers.glob("shard-*.jsonl")) if p.name not in made][
        : None if limit is None else max(0, limit - len(made))
    ]
    gen = torch.Generator().manual_seed(0)
    for path in tqdm(todo, desc="feature shards", unit="shard"):
        seqs, starts = read_answers(path, seq_len)
        if not seqs:  # every prompt in it fills seq_len: nothing of its answers to train on
            manifest["shards"].append({"answers": path.name, "file": None, "sequences": 0, "positions": 0})
            continue
        t0 = time.perf_counter()
        lengths = torch.tensor([len(s) for s in seqs])
        parts, order = [], []
        for group in tqdm(length_buckets(lengths, batch_tokens, gen), desc=path.stem, unit="batch", leave=False):
            parts.append(extract_features(model, [seqs[i] for i in group.tolist()], layer_ids, batch_size=len(group)))
            order.extend(group.tolist())
        packed = PackedFeatures.pack(parts, [starts[i] for i in order])
        name = FEATURES_NAME.format(stem=path.stem)
        packed.save(out / name)
        seconds = time.perf_counter() - t0
        manifest["shards"].append(
            {
                "answers": path.name,
                "file": name,
                "sequences": len(packed),
                "positions": packed.num_positions,
                "answer_positions": int((packed.lengths - packed.answer_starts).sum()),
                "seconds": round(seconds, 1),
                "tok_s": round(packed.num_positions / seconds, 1),
                "machine": machine_info()["cpu"],
            }
        )
        manifest["positions"] = sum(s["positions"] for s in manifest["shards"])
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
