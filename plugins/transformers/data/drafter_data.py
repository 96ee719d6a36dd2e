"""Training data for drafter heads: ShareGPT conversations through the target's chat template, and
the target's features at the head's layers, computed once and cached to disk."""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm import tqdm

from sagespec.common.datasets import dataset_file, iter_sharegpt
from sagespec.common.training.eagle_trainer import FeatureSet


def conversation_ids(tokenizer, max_conversations: int, seq_len: int, min_len: int = 32) -> list[list[int]]:
    """Token ids of ShareGPT conversations (user/assistant turns, chat template), cut to seq_len."""
    out = []
    for conv in iter_sharegpt(dataset_file("sharegpt")):
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(conv["turns"])]
        ids = tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=False)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)[:seq_len]
        if len(ids) >= min_len:
            out.append(ids)
        if len(out) >= max_conversations:
            break
    return out


@torch.no_grad()
def self_distilled_ids(
    model, tokenizer, max_conversations: int, seq_len: int, batch_size: int = 32, min_len: int = 32
) -> list[list[int]]:
    """The target's own greedy answers to ShareGPT's first user turns (self-distillation data):
    chat-templated prompt + the target's answer, cut to seq_len. Prompts leave at least half of
    seq_len for the answer and are batched by length, so no batch generates past seq_len for most
    of its rows."""
    prompts = []
    for conv in iter_sharegpt(dataset_file("sharegpt")):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": conv["turns"][0]}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
        if len(ids) <= seq_len // 2:
            prompts.append(ids)
        if len(prompts) >= max_conversations:
            break
    prompts.sort(key=len)
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos, default=0)
    out = []
    for a in tqdm(range(0, len(prompts), batch_size), desc="target answers", unit="batch"):
        chunk = prompts[a : a + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, p in enumerate(chunk):  # left padding: every answer starts at the same column
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        gen = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            pad_token_id=pad,
            max_new_tokens=seq_len - min(len(p) for p in chunk),
        )
        for i, p in enumerate(chunk):
            answer = gen[i, width:].tolist()
            ends = [j for j, t in enumerate(answer) if t in eos]
            if ends:  # a finished answer keeps its end token; what follows is padding
                answer = answer[: ends[0] + 1]
            seq = (p + answer)[:seq_len]
            if len(seq) >= min_len:
                out.append(seq)
    return out


@torch.no_grad()
def extract_features(
    model, sequences: list[list[int]], layer_ids, batch_size: int = 4, store_dtype=torch.bfloat16
) -> FeatureSet:
    """One target forward per batch; keeps the chosen layers' hidden states and the final normed
    hidden state per position (the target's logits are that times its output layer)."""
    seq_len = max(len(s) for s in sequences)
    n = len(sequences)
    h = model.config.hidden_size
    feats = torch.zeros(n, seq_len, len(layer_ids) * h, dtype=store_dtype)
    final = torch.zeros(n, seq_len, h, dtype=store_dtype)
    tokens = torch.zeros(n, seq_len, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in sequences])
    for a in tqdm(range(0, n, batch_size), desc="target features", unit="batch"):
        chunk = sequences[a : a + batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, s in enumerate(chunk):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        out = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hs = out.hidden_states
        feats[a : a + len(chunk), :width] = torch.cat([hs[i] for i in layer_ids], -1).to(store_dtype)
        final[a : a + len(chunk), :width] = out.last_hidden_state.to(store_dtype)
        tokens[a : a + len(chunk), :width] = ids
    return FeatureSet(feats, final, tokens, lengths)


def cached_features(path: Path, build) -> FeatureSet:
    if path.is_file():
        return FeatureSet.load(path)
    data = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    data.save(path)
    return data
