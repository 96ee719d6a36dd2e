"""Running a Hugging Face decoder with some of its layers skipped, in place (no copy of weights).

While `skipping_layers(model, skip)` is open, each skipped decoder layer is replaced by a module
that returns its input hidden states: the residual stream passes through untouched and the layer
writes no KV. Indices stay aligned (per-layer attention types, cache layers), so every architecture
the reference runtime loads runs the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class _SkippedLayer(nn.Module):
    """Stands in for a decoder layer: hidden states in, the same hidden states out."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        if hasattr(layer, "attention_type"):
            self.attention_type = layer.attention_type

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return hidden_states


@contextmanager
def skipping_layers(model, skip: frozenset[int]) -> Iterator[None]:
    layers = model.get_decoder().layers
    originals = {i: layers[i] for i in skip}
    try:
        for i, layer in originals.items():
            layers[i] = _SkippedLayer(layer)
        yield
    finally:
        for i, layer in originals.items():
            layers[i] = layer
