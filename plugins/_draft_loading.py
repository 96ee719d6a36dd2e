"""Loading a draft model inside an engine's worker: a Hugging Face causal LM sharing the target's
tokenizer (the shipped EAGLE heads are found by `common.shipped.shipped_head_for`)."""

from __future__ import annotations

from sagespec.common.drafters import check_shared_vocabulary
from sagespec.common.params import ConfigError


def load_draft_model(folder: str, target_path: str, target_model):
    """A Hugging Face causal LM that shares the target's tokenizer, in the target's dtype."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (Path(folder) / "config.json").is_file():
        raise ConfigError(
            f"drafter 'draft_model': model={folder!r} is not a Hugging Face model folder (no config.json)"
        )
    dtype = next(target_model.parameters()).dtype
    lm = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    target_vocab = target_model.config.vocab_size
    if lm.config.vocab_size != target_vocab:
        raise ConfigError(
            f"drafter 'draft_model': vocabulary size {lm.config.vocab_size} differs from the target's {target_vocab}"
        )
    try:
        draft_tok, target_tok = AutoTokenizer.from_pretrained(folder), AutoTokenizer.from_pretrained(target_path)
    except (OSError, ValueError):
        return lm  # a folder without tokenizer files: the sizes above are all there is to compare
    check_shared_vocabulary(target_tok.get_vocab(), draft_tok.get_vocab(), f"drafter 'draft_model' {folder}")
    return lm
