"""Medusa heads: K residual blocks on the target's final normed hidden state, one per future token.

The feature of position t (which gave token t + 1, the tree's root) goes through head i's blocks
(x + SiLU(W x + b), Medusa's residual block) and the target's own output layer, restricted to a
draft vocabulary, to predict token t + 2 + i. Every head reads the same feature, so a tree node at
depth d draws its children from head d whatever its parent: one pass of all heads per step scores
the whole tree. Blocks start at zero (each head starts as the target's own next-token guess).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from ..params import ConfigError
from ..policies.base import TreeShape, cap_depth
from ..random_source import RandomSource
from ..sampling import SamplingParams
from ..tree import DraftTree
from .base import DraftContext, DrafterNeeds
from .checkpoint import CONFIG_NAME, read_config, read_weights, write_checkpoint
from .eagle import committed_features
from .expansion import drive, growth

MEDUSA_FORMAT = "sagespec-medusa"


@dataclass(frozen=True)
class MedusaConfig:
    hidden_size: int
    vocab_size: int  # the target's
    num_target_layers: int  # the heads read hidden-state output number num_target_layers (final, normed)
    num_heads: int = 4
    num_layers: int = 1  # residual blocks per head
    draft_vocab_size: int | None = None  # None: the target's whole vocabulary

    def __post_init__(self) -> None:
        for name, low in (("num_heads", 1), ("num_layers", 1), ("hidden_size", 1), ("vocab_size", 2)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"medusa heads: {name}={value!r} must be an integer >= {low}")
        if self.draft_vocab_size is not None and not 1 <= self.draft_vocab_size <= self.vocab_size:
            raise ConfigError(
                f"medusa heads: draft_vocab_size={self.draft_vocab_size} must lie in 1..{self.vocab_size} "
                "(the target's vocabulary)"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"format": MEDUSA_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MedusaConfig:
        if d.get("format") != MEDUSA_FORMAT:
            raise ConfigError(f"medusa heads: config format is {d.get('format')!r}; expected {MEDUSA_FORMAT!r}")
        fields = {k: v for k, v in d.items() if k != "format"}
        unknown = set(fields) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"medusa heads: unknown config keys {sorted(unknown)}")
        return cls(**fields)

    def check_target(self, hidden_size: int, vocab_size: int, num_layers: int) -> None:
        """One ConfigError naming every field that differs from the target's."""
        wrong = [
            f"{name} {mine} (target: {theirs})"
            for name, mine, theirs in (
                ("hidden_size", self.hidden_size, hidden_size),
                ("vocab_size", self.vocab_size, vocab_size),
                ("num_target_layers", self.num_target_layers, num_layers),
            )
            if mine != theirs
        ]
        if wrong:
            raise ConfigError("medusa heads were trained for another target: " + "; ".join(wrong))


class MedusaHeads(nn.Module):
    """blocks[i][j]: head i's j-th residual linear; the output layer is the target's (not trained),
    its rows `d2t` when the heads use a draft vocabulary."""

    d2t: torch.Tensor  # a registered buffer: draft column -> target token id

    def __init__(self, config: MedusaConfig, lm_head_weight: torch.Tensor) -> None:
        super().__init__()
        if tuple(lm_head_weight.shape) != (config.vocab_size, config.hidden_size):
            raise ConfigError(
                f"medusa heads: the target's output layer is {tuple(lm_head_weight.shape)}; "
                f"the heads need ({config.vocab_size}, {config.hidden_size})"
            )
        self.config = config
        h = config.hidden_size
        self.blocks = nn.ModuleList(
            nn.ModuleList(nn.Linear(h, h) for _ in range(config.num_layers)) for _ in range(config.num_heads)
        )
        vd = config.draft_vocab_size or config.vocab_size
        self.register_buffer("d2t", torch.arange(vd), persistent=config.draft_vocab_size is not None)
        self.target_lm_head = lm_head_weight.detach()  # shared with the target: never a copy
        self.zero_blocks()

    def head_layers(self) -> list[list[nn.Linear]]:
        """blocks[i][j], typed."""
        return [[cast(nn.Linear, linear) for linear in cast(nn.ModuleList, head)] for head in self.blocks]

    @property
    def dtype(self) -> torch.dtype:
        return self.head_layers()[0][0].weight.dtype

    def zero_blocks(self) -> None:
        with torch.no_grad():
            for p in self.blocks.parameters():
                p.zero_()

    @property
    def draft_token_ids(self) -> torch.Tensor | None:
        return None if self.config.draft_vocab_size is None else self.d2t

    def output_weight(self) -> torch.Tensor:
        """[draft vocab, H]: the target's output rows the heads score."""
        w = self.target_lm_head
        return w if self.config.draft_vocab_size is None else w[self.d2t]

    def hidden(self, features: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [K, ..., H]: every head's output."""
        x = features.to(self.dtype)
        outs = []
        for head in self.head_layers():
            y = x
            for linear in head:
                y = y + torch.nn.functional.silu(linear(y))
            outs.append(y)
        return torch.stack(outs)

    def draft_logits(self, features: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """[..., H] -> [K, ..., draft vocab] logits in fp32."""
        w = self.output_weight() if weight is None else weight
        return (self.hidden(features) @ w.to(self.dtype).T).float()

    # ---- checkpoints --------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        write_checkpoint(folder, self.config.to_dict(), self.state_dict())

    @classmethod
    def load(cls, folder: str | Path, lm_head_weight: torch.Tensor, num_target_layers: int) -> MedusaHeads:
        config = MedusaConfig.from_dict(read_config(folder, "medusa heads"))
        config.check_target(lm_head_weight.shape[1], lm_head_weight.shape[0], num_target_layers)
        heads = cls(config, lm_head_weight)
        state = read_weights(folder, "medusa heads")
        expected = heads.state_dict()
        wrong = sorted(set(state) ^ set(expected))
        wrong += [k for k in state if k in expected and state[k].shape != expected[k].shape]
        if wrong:
            raise ConfigError(f"medusa heads: weights do not match {CONFIG_NAME} (keys {wrong[:6]})")
        heads.load_state_dict(state)
        d2t = heads.d2t
        if d2t.unique().numel() != d2t.numel() or bool((d2t < 0).any() | (d2t >= config.vocab_size).any()):
            raise ConfigError(f"medusa heads: d2t must hold {d2t.numel()} distinct ids in 0..{config.vocab_size - 1}")
        return heads.to(lm_head_weight.dtype).eval()

    @classmethod
    def for_target(
        cls,
        text_config: Any,
        lm_head_weight: torch.Tensor,
        num_heads: int = 4,
        num_layers: int = 1,
        draft_vocab: torch.Tensor | None = None,
    ) -> MedusaHeads:
        """Fresh heads (zero blocks) for a target; `draft_vocab`: the target ids the heads score."""
        config = MedusaConfig(
            hidden_size=text_config.hidden_size,
            vocab_size=text_config.vocab_size,
            num_target_layers=text_config.num_hidden_layers,
            num_heads=num_heads,
            num_layers=num_layers,
            draft_vocab_size=None if draft_vocab is None else int(draft_vocab.numel()),
        )
        heads = cls(config, lm_head_weight)
        if draft_vocab is not None:
            heads.d2t.copy_(draft_vocab.sort().values)
        return heads


class MedusaDrafter:
    name = "medusa"

    def __init__(self, heads: MedusaHeads, sample_children: bool = False) -> None:
        self.heads = heads
        self.sample_children = sample_children
        self.needs = DrafterNeeds(hidden_states=True, hidden_layer_ids=(heads.config.num_target_layers,))
        self._weight = heads.output_weight()  # [draft vocab, H], gathered once

    def begin(self) -> None:
        """Medusa heads keep no per-request state."""

    @torch.no_grad()
    def propose(self, context: DraftContext, shape: TreeShape, params: SamplingParams, rng: RandomSource) -> DraftTree:
        tokens, feats, _ = committed_features(context, "medusa")
        logits = self.heads.draft_logits(feats[-1], self._weight)  # [K, draft vocab]
        grow = growth(
            int(tokens[-1]),
            logits[0],
            cap_depth(shape, self.heads.config.num_heads),
            params,
            rng,
            self.sample_children,
            self.heads.draft_token_ids,
            self.heads.config.vocab_size,
        )
        # A node at depth d takes its children from head d.
        return drive(grow, lambda request: logits[torch.tensor(request.depths)])
