"""`smollm2-llava`: a LLaVA-architecture stand-in for a vision-language model, built offline.

SmolLM2-135M-Instruct's text model (real weights) + a small random CLIP vision tower (64x64 pixels,
8x8 patches: 64 image rows per image) + a random projector, saved once as a Hugging Face folder with
a `LlavaProcessor` (CLIP's PIL image path; no torchvision needed). The image placeholder `<image>`
takes the id of SmolLM2's unused `<empty_output>` special token, so the vocabulary (and the shipped
EAGLE head) stay those of the text model. The vision tower is untrained: the model's answers ignore
what the image shows, so acceptance figures on it measure the drafting pipeline, not VLM quality.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

STAND_IN_NAME = "smollm2-llava"
IMAGE_TOKEN, REUSED_TOKEN = "<image>", "<empty_output>"
IMAGE_SIZE, PATCH_SIZE = 64, 8
BUILD_VERSION = "2"  # bump when the build changes; older folders are rebuilt
VERSION_FILE = "sagespec_stand_in_version"
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# SmolLM2's template, with list contents ({"type": "image"} / {"type": "text"}) rendered in order.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\n" + SYSTEM_PROMPT + "<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>\\n' }}"
    "{% else %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _rename_token(tokenizer_dir: Path) -> int:
    """Renames REUSED_TOKEN to IMAGE_TOKEN in the tokenizer files; returns its id."""
    path = tokenizer_dir / "tokenizer.json"
    tj = json.loads(path.read_text())
    vocab = tj["model"]["vocab"]
    token_id = vocab.pop(REUSED_TOKEN)
    vocab[IMAGE_TOKEN] = token_id
    for added in tj["added_tokens"]:
        if added["id"] == token_id:
            added["content"] = IMAGE_TOKEN
    path.write_text(json.dumps(tj, ensure_ascii=False))
    cfg_path = tokenizer_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    if str(token_id) in cfg.get("added_tokens_decoder", {}):
        cfg["added_tokens_decoder"][str(token_id)]["content"] = IMAGE_TOKEN
    cfg_path.write_text(json.dumps(cfg, ensure_ascii=False))
    return token_id


def build_stand_in(text_folder: Path, out: Path, seed: int = 0) -> None:
    """Writes the stand-in (bf16) and its processor into `out`."""
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = Path(tmp)
        AutoTokenizer.from_pretrained(text_folder).save_pretrained(tok_dir)
        image_id = _rename_token(tok_dir)
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    text = AutoModelForCausalLM.from_pretrained(text_folder, dtype=torch.float32)
    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=64,
    )
    rows = (IMAGE_SIZE // PATCH_SIZE) ** 2
    config = LlavaConfig(
        vision_config=vision,
        text_config=text.config,
        image_token_index=image_id,
        image_seq_length=rows,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
        tie_word_embeddings=text.config.tie_word_embeddings,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(text.model.state_dict())
    if not config.tie_word_embeddings:
        model.lm_head.load_state_dict(text.lm_head.state_dict())
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    model.to(torch.bfloat16).save_pretrained(out)
    _nest_vision_weights(out)
    processor.save_pretrained(out)
    (out / VERSION_FILE).write_text(BUILD_VERSION + "\n")


def _nest_vision_weights(folder: Path) -> None:
    """Writes the vision tower's weights under `vision_tower.vision_model.*`, the llava-hf layout
    vLLM's CLIP loader reads (transformers saves them flat and loads either layout)."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    if not path.is_file():
        raise RuntimeError(f"expected one weights file {path} (the stand-in is small enough not to shard)")
    flat, nested = "vision_tower.", "vision_tower.vision_model."
    state = load_file(str(path))
    state = {
        (nested + k[len(flat) :] if k.startswith(flat) and not k.startswith(nested) else k): v for k, v in state.items()
    }
    save_file(state, str(path), metadata={"format": "pt"})


def stand_in_folder(cache: Path, text_folder: Path) -> Path:
    """The stand-in's folder under `cache`, built on first use (about 20 s) or when an older build
    is there."""
    folder = cache / STAND_IN_NAME
    marker = folder / VERSION_FILE
    if marker.is_file() and marker.read_text().strip() == BUILD_VERSION:
        return folder
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
    build_stand_in(text_folder, tmp)
    if folder.exists():  # an older build
        shutil.rmtree(folder, ignore_errors=True)
    try:
        tmp.rename(folder)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
