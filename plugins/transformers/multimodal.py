"""Image + text prompts for the reference runtime (LLaVA-style models: image rows replace the
placeholder tokens' embeddings; positions stay 1-D and consecutive, image rows included)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sagespec.common.drafters import ImageInputs
from sagespec.common.params import ConfigError


@dataclass(frozen=True)
class ImagePrompt:
    """A prompt whose input embeddings the runtime feeds instead of looking its tokens up."""

    input_ids: list[int]
    embeds: torch.Tensor  # [L, H]: token embeddings, image rows in place of the placeholders
    images: ImageInputs


def image_token_id(model) -> int:
    tid = getattr(model.config, "image_token_index", None)
    if tid is None:
        tid = getattr(model.config, "image_token_id", None)
    if tid is None or not hasattr(model, "get_image_features"):
        raise ConfigError(
            f"{type(model).__name__} is not a vision-language model: image prompts need one "
            "(e.g. the 'smollm2-llava' stand-in)"
        )
    if not all(hasattr(model.config, k) for k in ("vision_feature_layer", "vision_feature_select_strategy")):
        raise ConfigError(
            f"{type(model).__name__}: the reference runtime takes LLaVA-style models (image rows "
            "in place of placeholder tokens, 1-D positions); this one is not supported yet"
        )
    return int(tid)


def placeholder_spans(input_ids: torch.Tensor, token_id: int) -> tuple[tuple[int, int], ...]:
    """Maximal runs of `token_id` as (start, end) pairs; each run is one image."""
    is_image = (input_ids == token_id).int()
    edges = torch.diff(torch.cat([torch.zeros(1, dtype=torch.int), is_image, torch.zeros(1, dtype=torch.int)]))
    starts, ends = torch.nonzero(edges == 1).flatten(), torch.nonzero(edges == -1).flatten()
    return tuple((int(s), int(e)) for s, e in zip(starts, ends))


@torch.no_grad()
def build_image_prompt(model, input_ids, pixel_values: torch.Tensor) -> ImagePrompt:
    """Runs the model's vision tower and projector once and places their rows into the prompt."""
    tid = image_token_id(model)
    ids = torch.as_tensor(input_ids, dtype=torch.long).flatten()
    spans = placeholder_spans(ids, tid)
    cfg = model.config
    out = model.get_image_features(
        pixel_values=pixel_values.to(model.device, model.dtype),
        vision_feature_layer=cfg.vision_feature_layer,
        vision_feature_select_strategy=cfg.vision_feature_select_strategy,
        return_dict=True,
    )
    rows = torch.cat([f.reshape(-1, f.shape[-1]) for f in out.pooler_output])
    n = sum(e - s for s, e in spans)
    if rows.shape[0] != n:
        raise ConfigError(
            f"the prompt holds {n} image placeholder tokens but the images give {rows.shape[0]} rows "
            f"(one image per placeholder run; let the processor expand the image token)"
        )
    embeds = model.get_input_embeddings()(ids.to(model.device)).clone()
    positions = torch.cat([torch.arange(s, e) for s, e in spans]) if spans else torch.zeros(0, dtype=torch.long)
    embeds[positions] = rows.to(embeds.dtype)
    return ImagePrompt(ids.tolist(), embeds, ImageInputs(spans, rows.detach()))
