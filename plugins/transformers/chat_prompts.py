"""Prompt sets through a model's chat template, as token ids (for engine lanes and benchmarks)."""
from __future__ import annotations


def chat_prompt_ids(model_folder, limit: int, dataset: str = "mt-bench") -> list[list[int]]:
    """The first `limit` prompts of `dataset` as single user turns, generation prompt appended
    (a model without a chat template, a base model, gets the prompt text to continue)."""
    from transformers import AutoTokenizer

    from sagespec.common.datasets import load_prompts
    tok = AutoTokenizer.from_pretrained(model_folder)
    out = []
    for p in load_prompts(dataset, limit=limit):
        if not tok.chat_template:
            out.append(tok(p.text)["input_ids"])
            continue
        ids = tok.apply_chat_template([{"role": "user", "content": p.text}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
    return out
