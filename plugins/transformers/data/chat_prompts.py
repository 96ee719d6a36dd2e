"""Prompt sets through a model's chat template, as token ids (for engine lanes and benchmarks)."""

from __future__ import annotations


def chat_prompt_ids(model_folder, limit: int, dataset: str = "mt-bench") -> list[list[int]]:
    """The first `limit` prompts of `dataset` as single user turns, generation prompt appended
    (a model without a chat template, a base model, gets the prompt text to continue)."""
    from transformers import AutoTokenizer

    from sagespec.common.datasets import load_prompts

    tok = AutoTokenizer.from_pretrained(model_folder)
    return [conversation_ids(tok, [{"role": "user", "content": p.text}]) for p in load_prompts(dataset, limit=limit)]


# The follow-up of a conversation whose dataset has no second user turn: the same code, edited.
EDIT_REQUEST = "Now add type hints and a docstring, and write the whole function out again."


def conversation_ids(tokenizer, messages: list[dict]) -> list[int]:
    """A conversation (role/content dicts) through the chat template, generation prompt appended;
    without a template, the turns' texts one after another."""
    if not tokenizer.chat_template:
        return tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def second_turn_ids(tokenizer, first: str, answer: list[int], follow_up: str | None) -> list[int]:
    """The second request of a two-turn conversation: the first turn, the model's answer to it (token
    ids, decoded), then `follow_up` (EDIT_REQUEST when the dataset has none)."""
    return conversation_ids(
        tokenizer,
        [
            {"role": "user", "content": first},
            {"role": "assistant", "content": tokenizer.decode(answer, skip_special_tokens=True)},
            {"role": "user", "content": follow_up or EDIT_REQUEST},
        ],
    )
