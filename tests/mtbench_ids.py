"""MT-Bench first turns through a model's chat template, as token ids (shared by the engine lanes)."""
from __future__ import annotations


def mtbench_chat_ids(model_folder, limit: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from sagespec.common.datasets import load_prompts
    tok = AutoTokenizer.from_pretrained(model_folder)
    out = []
    for p in load_prompts("mt-bench", limit=limit):
        ids = tok.apply_chat_template([{"role": "user", "content": p.text}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
    return out
