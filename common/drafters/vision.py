"""The vision-aware drafter: an EAGLE head whose context holds a compressed view of the prompt's images.

One class, three switches, because every variant is the same EAGLE drafting (same head, same cache
bookkeeping, same tree growth) and differs only in (1) which image rows enter the draft's cache and
(2) what extra image signal reaches the head; the switches compose (prune + cross-attention is DREAM):
- `compress`: "none" keeps every image row (with its real embedding, not the placeholder's);
  "prune" keeps the top `keep_ratio` of each image's rows by saliency (SpecVLM/HIPPO style;
  `prune_by` "embedding" or the engine's "attention"); "adaptor" replaces each image span by one
  compressed token at the span's last position (ViSpec).
- `global_fusion`: text features become fc([f; g]) with the adaptor's global image vector g (ViSpec).
- `cross_attention`: the head's outputs attend over the target's features of the kept image rows
  through a zero-initialised gate (DREAM).
Kept rows keep their original positions, so text after an image sits where it sits for the target.

Cache invariant: after each `propose` the head's cache holds one entry per committed pair
(feature t, token t+1) except the image rows compression dropped (`dropped`, fixed per request), and
`cache_positions` holds the RoPE position of each entry.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..params import ConfigError
from ..policies.base import TreeShape
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds, ImageInputs
from .eagle import HeadScorer, committed_features
from .eagle_head import EagleHead
from .expansion import grow_tree
from .tree_lm import ScratchTree, causal_extension_mask
from .vision_modules import CrossAttentionInjection, GlobalFusion, ImageAdaptor, embedding_saliency, keep_top

COMPRESS_MODES = ("none", "prune", "adaptor")
PRUNE_BY = ("embedding", "attention")
VISION_CONFIG_NAME, VISION_WEIGHTS_NAME = "vision_config.json", "vision.safetensors"


@dataclass(frozen=True)
class VisionConfig:
    compress: str = "prune"
    keep_ratio: float = 0.5
    prune_by: str = "embedding"
    num_queries: int = 4
    global_fusion: bool = False
    cross_attention: bool = False
    num_heads: int = 4

    def __post_init__(self) -> None:
        bad = []
        if self.compress not in COMPRESS_MODES:
            bad.append(f"compress={self.compress!r} (one of {list(COMPRESS_MODES)})")
        if not 0.0 < self.keep_ratio <= 1.0:
            bad.append(f"keep_ratio={self.keep_ratio} (in (0, 1])")
        if self.prune_by not in PRUNE_BY:
            bad.append(f"prune_by={self.prune_by!r} (one of {list(PRUNE_BY)})")
        if self.num_queries < 1 or self.num_heads < 1:
            bad.append(f"num_queries={self.num_queries}, num_heads={self.num_heads} (both >= 1)")
        if self.global_fusion and self.compress != "adaptor":
            bad.append("global_fusion=True needs compress='adaptor' (g is the adaptor's global vector)")
        if bad:
            raise ConfigError("vision drafter: " + "; ".join(bad))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VisionConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"vision drafter: unknown option(s) {unknown}; allowed: {sorted(known)}")
        return cls(**d)


# The named variants (`--drafter vispec` etc.); any field can still be overridden.
VISION_PRESETS = {
    "vispec": VisionConfig(compress="adaptor", global_fusion=True),
    "dream": VisionConfig(compress="prune", keep_ratio=0.5, prune_by="attention", cross_attention=True),
    "vision-prune": VisionConfig(compress="prune", keep_ratio=0.25, prune_by="embedding"),
}


class VisionModules(nn.Module):
    """The vision switches' weights (only those the config turns on)."""

    def __init__(self, config: VisionConfig, hidden: int) -> None:
        super().__init__()
        self.config = config
        self.adaptor = (
            ImageAdaptor(hidden, config.num_queries, config.num_heads) if config.compress == "adaptor" else None
        )
        self.fusion = GlobalFusion(hidden) if config.global_fusion else None
        self.cross = CrossAttentionInjection(hidden, config.num_heads) if config.cross_attention else None

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / VISION_CONFIG_NAME).write_text(json.dumps(asdict(self.config), indent=2) + "\n")
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}, str(folder / VISION_WEIGHTS_NAME)
        )

    @classmethod
    def load_or_init(cls, folder: str | Path | None, config: VisionConfig, hidden: int, seed: int = 0) -> VisionModules:
        """Trained weights from `folder` when it holds them for this config; else the initial state."""
        torch.manual_seed(seed)
        mods = cls(config, hidden)
        path = None if folder is None else Path(folder) / VISION_WEIGHTS_NAME
        if path is not None and path.is_file():
            from safetensors.torch import load_file

            saved = VisionConfig.from_dict(json.loads(path.with_name(VISION_CONFIG_NAME).read_text()))
            if saved != config:
                raise ConfigError(f"vision drafter: {folder} was trained with {saved}, not {config}")
            mods.load_state_dict(load_file(str(path)))
        return mods


class VisionDrafter:
    name = "vision"
    _g: torch.Tensor | None  # the adaptor's global image vector of the request's prompt
    _image_features: torch.Tensor | None  # fused target features of the kept image rows (cross-attention)

    def __init__(
        self, head: EagleHead, config: VisionConfig, modules: VisionModules | None = None, sample_children: bool = False
    ) -> None:
        self.head = head
        self.config = config
        self.modules = (modules or VisionModules(config, head.config.hidden_size)).to(head.q_proj.weight.dtype).eval()
        self.sample_children = sample_children
        self.needs = DrafterNeeds(hidden_states=True, hidden_layer_ids=head.config.target_layer_ids, multimodal=True)
        self.begin()

    def begin(self) -> None:
        self.head.reset_cache()
        self.dropped = 0
        self.cache_positions = torch.zeros(0, dtype=torch.long)
        self._g = self._image_features = None

    # ---- the prompt: which pairs enter the cache, with which embeddings ----------------
    def kept_rows(self, images: ImageInputs) -> list[torch.Tensor]:
        """Per image span, the indices (into that span) of the rows the draft keeps."""
        c, kept = self.config, []
        for (s, e), rows in zip(images.spans, images.row_slices()):
            n = e - s
            if c.compress == "none":
                kept.append(torch.arange(n))
            elif c.compress == "adaptor":
                kept.append(torch.tensor([n - 1]))
            else:
                if c.prune_by == "attention":
                    if images.saliency is None:
                        raise ConfigError(
                            "vision drafter: prune_by='attention' needs the target's attention "
                            "saliency, which this engine does not give; use prune_by='embedding'"
                        )
                    scores = images.saliency[rows]
                else:
                    scores = embedding_saliency(images.embeds[rows])
                kept.append(keep_top(scores, c.keep_ratio))
        return kept

    def prompt_entries(
        self, tokens: torch.Tensor, feats: torch.Tensor, images: ImageInputs | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(entry pair indices t, their input embeddings) for the prompt's committed pairs."""
        pairs = feats.shape[0]
        embeds = self.head.embed(tokens[1 : pairs + 1])
        keep = torch.ones(pairs, dtype=torch.bool)
        if images is None:
            return torch.arange(pairs), embeds
        if images.spans[-1][1] > pairs:
            raise ValueError(f"image span {images.spans[-1]} reaches past the prompt's {pairs + 1} tokens")
        kept_features = []
        for (s, e), rows, span in zip(images.spans, self.kept_rows(images), images.row_slices()):
            span_rows = images.embeds[span]
            rows = rows[s + rows >= 1]  # position 0 pairs with no feature: no entry
            keep[max(s, 1) - 1 : e - 1] = False  # pair t carries token t + 1
            keep[s - 1 + rows] = True
            if self.modules.adaptor is not None:
                token, g = self.modules.adaptor(span_rows)
                self._g = g
                if rows.numel():
                    embeds[e - 2] = token.to(embeds.dtype)
            else:
                embeds[s - 1 + rows] = span_rows[rows].to(embeds.dtype)
            kept_features.append(feats[s + rows])  # the target's features at the kept rows
        if self.modules.cross is not None:
            self._image_features = self.head.fuse(torch.cat(kept_features))
        idx = torch.nonzero(keep).flatten()
        return idx, embeds[idx]

    def features(self, raw: torch.Tensor) -> torch.Tensor:
        fused = self.head.fuse(raw)
        if self.modules.fusion is not None and self._g is not None:
            fused = self.modules.fusion(fused, self._g)
        return fused

    def refine(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.modules.cross is None or self._image_features is None:
            return hidden
        return self.modules.cross(hidden, self._image_features)

    @torch.no_grad()
    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        tokens, feats, committed_pairs = committed_features(context, "vision")
        cached_pairs = self.head.cache_length + self.dropped
        if self.head.cache_length == 0:  # first step of a request: the prompt
            idx, embeds = self.prompt_entries(tokens, feats, context.images)
            self.dropped = committed_pairs - idx.numel()
            positions = idx + 1
            out = self.refine(
                self.head.hidden_step(
                    tokens[idx + 1],
                    self.features(feats[idx]),
                    positions,
                    causal_extension_mask(0, idx.numel()),
                    embeds=embeds,
                )
            )
            self.cache_positions = positions
        else:
            m = min(cached_pairs, committed_pairs - 1)
            self.head.truncate(m - self.dropped)
            self.cache_positions = self.cache_positions[: m - self.dropped]
            new = committed_pairs - m
            positions = torch.arange(m + 1, committed_pairs + 1)
            out = self.refine(
                self.head.hidden_step(
                    tokens[m + 1 :],
                    self.features(feats[m:]),
                    positions,
                    causal_extension_mask(self.head.cache_length, new),
                )
            )
            self.cache_positions = torch.cat([self.cache_positions, positions])
        base = self.head.cache_length
        scorer = HeadScorer(self.head, ScratchTree(base, root_position=committed_pairs), out[-1], self.refine)
        tree = grow_tree(
            int(tokens[-1]), self.head.logits(out[-1:])[0], scorer, shape, params, rng, self.sample_children
        )
        self.head.truncate(base)
        return tree
