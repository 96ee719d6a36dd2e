"""A request's images as vLLM's runner holds them: placeholder ranges and encoder outputs.

Each multimodal item of a request (`CachedRequestState.mm_features`) has its placeholder range in
the prompt (`mm_position.offset/length`) and its encoder output in `runner.encoder_cache` under
its identifier, from the step that computed it until the scheduler frees it. The proposer asks
while the request has no images on record, so the rows are read while they are there.
"""

from __future__ import annotations

import torch

from sagespec.common.drafters import ImageInputs


def request_images(runner, req_id: str, attention: torch.Tensor | None = None) -> ImageInputs | None:
    """The request's image spans and rows, or None when it has no images or a row is missing;
    `attention` (the target's, over the whole prompt) gives the rows' saliency."""
    state = runner.requests.get(req_id)
    features = [f for f in (getattr(state, "mm_features", None) or []) if f.modality == "image"]
    if not features:
        return None
    spans, rows = [], []
    for f in sorted(features, key=lambda f: f.mm_position.offset):
        out = runner.encoder_cache.get(f.identifier)
        pos = f.mm_position
        if out is None or pos.is_embed is not None:  # not computed yet / freed; or a partial-embed layout
            return None
        spans.append((pos.offset, pos.offset + pos.length))
        rows.append(out.reshape(-1, out.shape[-1]).detach().float().cpu())
    rows = torch.cat(rows)
    if rows.shape[0] != sum(e - s for s, e in spans):
        return None
    images = ImageInputs(tuple(spans), rows)
    if attention is not None:
        images = ImageInputs(images.spans, rows, attention[images.positions].float())
    return images


def request_has_images(runner, req_id: str) -> bool:
    state = runner.requests.get(req_id)
    return any(f.modality == "image" for f in (getattr(state, "mm_features", None) or []))
