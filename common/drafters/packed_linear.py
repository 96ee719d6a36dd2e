"""Fixed linear maps for inference, with several projections of one input fused into one matmul.

On CPU with oneDNN, the weight is reordered once into oneDNN's blocked layout (what inductor's
weight prepacking does); a one-row matmul then runs about 2-3x faster than `F.linear` on the plain
row-major weight. Elsewhere (GPU, dtypes oneDNN does not pack, builds without it) `F.linear` runs on
the fused weight. The maps are snapshots: whoever builds one rebuilds it when its weights change.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_PACKABLE = (torch.float32, torch.bfloat16)


def _onednn_pack(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight in oneDNN's layout, or None where oneDNN cannot run it."""
    ops = getattr(torch.ops, "mkldnn", None)
    if (
        ops is None
        or weight.device.type != "cpu"
        or weight.dtype not in _PACKABLE
        or not torch.backends.mkldnn.is_available()
        or not hasattr(ops, "_reorder_linear_weight")
        or not hasattr(ops, "_linear_pointwise")
    ):
        return None
    try:
        packed = ops._reorder_linear_weight(weight, 1)
        probe = torch.ones(1, weight.shape[1], dtype=weight.dtype)
        ops._linear_pointwise(probe, packed, None, "none", [], "")
    except RuntimeError:  # an ISA or build without this kernel
        return None
    return packed


class PackedLinear:
    """x [..., in] -> [..., sum(out)] for the weights [out_i, in] stacked in order (no bias)."""

    def __init__(self, weights: list[torch.Tensor]) -> None:
        weight = torch.cat([w.detach() for w in weights]).contiguous()
        self.sizes = [w.shape[0] for w in weights]
        self.in_features = weight.shape[1]
        self.packed = _onednn_pack(weight)
        self.weight = weight if self.packed is None else None  # the packed copy replaces it

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).contiguous()
        if self.packed is not None:
            out = torch.ops.mkldnn._linear_pointwise(rows, self.packed, None, "none", [], "")
        else:
            assert self.weight is not None  # kept whenever packing was not possible
            out = F.linear(rows, self.weight)
        return out.view(*x.shape[:-1], out.shape[-1])

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each stacked projection's output, in the order the weights were given."""
        return self(x).split(self.sizes, dim=-1)
