"""An EAGLE-style feature head: one decoder layer over the target's hidden states.

The EAGLE-3 layout. Input at position t+1: the fused target features of position t (FC over the
concatenation of the layers in `target_layer_ids`; one layer = EAGLE-1 style, three = EAGLE-3) and
the embedding of token t+1. The decoder layer's attention reads [norm(embedding); norm(features)]
(2h wide); its residual stream starts from the features. Deeper draft steps feed the head's own
output hidden state (before the final norm) back in place of the fused features. Embeddings and
(unless a reduced draft vocabulary with its draft-to-target map `d2t` is configured) the output
layer are the target's, shared and frozen.

Checkpoint: one folder with `config.json` (EagleHeadConfig fields) and `model.safetensors`
(the head's own weights only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..params import ConfigError
from .checkpoint import CONFIG_NAME, read_config, read_weights, write_checkpoint
from .packed_linear import PackedLinear

ARCHITECTURE = "sagespec-eagle-head"


@dataclass(frozen=True)
class EagleHeadConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int  # the target's vocabulary
    target_hidden_size: int
    target_layer_ids: tuple[int, ...]  # indices into the target's hidden-state outputs
    draft_vocab_size: int | None = None  # None: the target's output layer is used as is
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @classmethod
    def for_target(
        cls,
        target_config: Any,
        target_layer_ids: Sequence[int] | None = None,
        draft_vocab_size: int | None = None,
    ) -> EagleHeadConfig:
        """A one-layer head shaped like the target (a transformers-style config object)."""
        n = target_config.num_hidden_layers
        heads = target_config.num_attention_heads
        rope = getattr(target_config, "rope_parameters", None) or {}
        return cls(
            hidden_size=target_config.hidden_size,
            num_attention_heads=heads,
            num_key_value_heads=getattr(target_config, "num_key_value_heads", heads),
            head_dim=getattr(target_config, "head_dim", None) or target_config.hidden_size // heads,
            intermediate_size=target_config.intermediate_size,
            vocab_size=target_config.vocab_size,
            target_hidden_size=target_config.hidden_size,
            target_layer_ids=tuple(target_layer_ids or (n,)),
            draft_vocab_size=draft_vocab_size,
            rms_norm_eps=float(target_config.rms_norm_eps),
            rope_theta=float(rope.get("rope_theta", getattr(target_config, "rope_theta", 10000.0))),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target_layer_ids"] = list(self.target_layer_ids)
        return {"architecture": ARCHITECTURE, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EagleHeadConfig:
        if d.get("architecture") != ARCHITECTURE:
            raise ConfigError(f"eagle head: config architecture {d.get('architecture')!r} is not {ARCHITECTURE!r}")
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["target_layer_ids"] = tuple(kw["target_layer_ids"])
        return cls(**kw)

    def check_target(self, hidden_size: int, vocab_size: int, num_layers: int) -> None:
        """Refuse a head built for another target, naming every mismatching field."""
        bad = []
        if self.target_hidden_size != hidden_size:
            bad.append(f"target_hidden_size={self.target_hidden_size} (target: {hidden_size})")
        if self.vocab_size != vocab_size:
            bad.append(f"vocab_size={self.vocab_size} (target: {vocab_size})")
        out_of_range = [i for i in self.target_layer_ids if not 0 <= i <= num_layers]
        if out_of_range or not self.target_layer_ids:
            bad.append(f"target_layer_ids={list(self.target_layer_ids)} (target has hidden states 0..{num_layers})")
        if self.draft_vocab_size is not None and not 0 < self.draft_vocab_size <= vocab_size:
            bad.append(f"draft_vocab_size={self.draft_vocab_size} (must be in 1..{vocab_size})")
        if bad:
            raise ConfigError("eagle head does not fit the target: " + "; ".join(bad))


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(var + eps)).to(x.dtype)


def _rope_tables(
    positions: torch.Tensor, d: int, theta: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [..., q, 1, d] of rotate-half RoPE at integer positions [..., q]."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
    ang = positions.to(device).float()[..., None] * inv
    ang = torch.cat([ang, ang], -1)[..., None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rope(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x [..., q, heads, d] rotated by `_rope_tables` of its positions."""
    cos, sin = tables
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class _DraftingWeights:
    """The head's projections as `PackedLinear`s for passes without autograd (q/k/v fused, gate/up
    fused). A snapshot of the weights it was built from: `EagleHead` rebuilds it when any changes."""

    def __init__(self, head: EagleHead) -> None:
        self.key = _weights_key(head)
        self.fc = PackedLinear([head.fc.weight])
        self.qkv = PackedLinear([head.q_proj.weight, head.k_proj.weight, head.v_proj.weight])
        self.o = PackedLinear([head.o_proj.weight])
        self.gate_up = PackedLinear([head.gate_proj.weight, head.up_proj.weight])
        self.down = PackedLinear([head.down_proj.weight])
        self.lm_head = PackedLinear([head.lm_head.weight]) if head.lm_head is not None else None


def _weights_key(head: EagleHead) -> tuple[tuple[int, torch.dtype, int], ...]:
    """Changes whenever a parameter is replaced, moved, cast or updated in place."""
    return tuple((p.data_ptr(), p.dtype, p._version) for p in head.parameters())


@dataclass(frozen=True)
class HeadCall:
    """One head pass over q pairs with `head`'s cache (see `EagleHead.hidden_step`); mask [q, cache + q].
    `last_only`: only the last row's logits are wanted."""

    head: EagleHead
    tokens: torch.Tensor
    features: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor
    last_only: bool = False


class EagleHead(nn.Module):
    d2t: torch.Tensor  # a registered buffer, present when a draft vocabulary is configured
    lm_head: nn.Linear | None
    k_cache: torch.Tensor | None
    v_cache: torch.Tensor | None  # set together with k_cache

    def __init__(self, config: EagleHeadConfig, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        super().__init__()
        c = self.config = config
        h, nh, nkv, hd = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.fc = nn.Linear(len(c.target_layer_ids) * c.target_hidden_size, h, bias=False)
        self.embed_norm = nn.Parameter(torch.ones(h))
        self.hidden_norm = nn.Parameter(torch.ones(h))
        self.q_proj = nn.Linear(2 * h, nh * hd, bias=False)
        self.k_proj = nn.Linear(2 * h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.post_norm = nn.Parameter(torch.ones(h))
        self.gate_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, h, bias=False)
        self.final_norm = nn.Parameter(torch.ones(h))
        if c.draft_vocab_size is not None:
            self.lm_head = nn.Linear(h, c.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.arange(c.draft_vocab_size, dtype=torch.long))
        else:
            self.lm_head = None
        # Shared with the target, never trained or saved here.
        self._embed = embed_weight.detach()
        self._target_lm_head = lm_head_weight.detach()
        # Holds one _DraftingWeights under "weights"; shallow copies (per-request heads) share it.
        self._drafting_cache: dict[str, _DraftingWeights] = {}
        self.reset_cache()

    def _packed(self) -> _DraftingWeights | None:
        """Packed projections when no gradient is being recorded (drafting), else None."""
        if torch.is_grad_enabled():
            return None
        weights = self._drafting_cache.get("weights")
        if weights is None or weights.key != _weights_key(self):
            weights = self._drafting_cache["weights"] = _DraftingWeights(self)
        return weights

    # ---- cache --------------------------------------------------------------------------
    def reset_cache(self) -> None:
        self.k_cache = self.v_cache = None

    @property
    def cache_length(self) -> int:
        return 0 if self.k_cache is None else self.k_cache.shape[0]

    def truncate(self, length: int) -> None:
        if self.k_cache is not None:
            assert self.v_cache is not None  # set together with k_cache
            self.k_cache, self.v_cache = self.k_cache[:length], self.v_cache[:length]

    # ---- forward ------------------------------------------------------------------------
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The target's (shared) embeddings of `tokens`, in the head's dtype."""
        return F.embedding(tokens.to(self._embed.device), self._embed).to(self.q_proj.weight.dtype)

    def fuse(self, target_features: torch.Tensor) -> torch.Tensor:
        """[q, len(layers) * target_hidden] -> [q, hidden]."""
        packed = self._packed()
        x = target_features.to(self.fc.weight.dtype)
        return self.fc(x) if packed is None else packed.fc(x)

    def attention_inputs(
        self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, embeds: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For pairs (features [..., q, h], tokens [..., q]) at RoPE positions [..., q]: the residual
        stream x and the rotated q, k and v ([..., q, heads, head_dim]). `embeds` [..., q, h], when
        given, stands in for the token embeddings (an image row in place of its placeholder)."""
        c = self.config
        dtype = self.q_proj.weight.dtype
        emb = (self.embed(tokens) if embeds is None else embeds).to(dtype)
        x = features.to(dtype)
        hidden = torch.cat(
            [_rms_norm(emb, self.embed_norm, c.rms_norm_eps), _rms_norm(x, self.hidden_norm, c.rms_norm_eps)], -1
        )
        lead = tokens.shape
        packed = self._packed()
        if packed is None:
            q, k, v = self.q_proj(hidden), self.k_proj(hidden), self.v_proj(hidden)
        else:
            q, k, v = packed.qkv.split(hidden)
        tables = _rope_tables(positions, c.head_dim, c.rope_theta, dtype, x.device)
        q = _rope(q.reshape(*lead, c.num_attention_heads, c.head_dim), tables)
        k = _rope(k.reshape(*lead, c.num_key_value_heads, c.head_dim), tables)
        v = v.reshape(*lead, c.num_key_value_heads, c.head_dim)
        return x, q, k, v

    def attention_outputs(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Residual x [..., q, h] plus attention output [..., q, heads, head_dim] -> output hidden."""
        packed = self._packed()
        if packed is None:
            x = x + self.o_proj(attn.flatten(-2))
            h2 = _rms_norm(x, self.post_norm, self.config.rms_norm_eps)
            return x + self.down_proj(F.silu(self.gate_proj(h2)) * self.up_proj(h2))
        x = x + packed.o(attn.flatten(-2))
        gate, up = packed.gate_up.split(_rms_norm(x, self.post_norm, self.config.rms_norm_eps))
        return x + packed.down(F.silu(gate) * up)

    def step(
        self,
        tokens: torch.Tensor,
        features: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        use_cache: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass of the head over q pairs (features [q, hidden], tokens [q]); `mask` is
        [q, cache_length + q]. Returns (output hidden [q, hidden], target-vocab logits [q, V])."""
        out = self.hidden_step(tokens, features, positions, mask, use_cache)
        return out, self.logits(out)

    def hidden_step(
        self,
        tokens: torch.Tensor,
        features: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        use_cache: bool = True,
        embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`step` without the output layer: the output hidden states [q, hidden] only."""
        c = self.config
        x, q, k, v = self.attention_inputs(tokens, features, positions, embeds)
        if self.k_cache is not None and self.k_cache.shape[0]:
            assert self.v_cache is not None  # set together with k_cache
            k_all, v_all = torch.cat([self.k_cache, k]), torch.cat([self.v_cache, v])
        else:
            k_all, v_all = k, v
        if use_cache:
            self.k_cache, self.v_cache = k_all, v_all
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1),
            k_all.transpose(0, 1),
            v_all.transpose(0, 1),
            attn_mask=mask.to(q.device),
            enable_gqa=c.num_key_value_heads != c.num_attention_heads,
        )
        return self.attention_outputs(x, attn.transpose(0, 1))

    @staticmethod
    def hidden_step_many(calls: list[HeadCall]) -> list[torch.Tensor]:
        """`hidden_step` for several caches at once (heads sharing one set of weights, e.g. the
        per-request copies of one head): the projections and the MLP run once over all calls'
        rows; attention runs per call against that call's own cache."""
        if not calls:
            return []
        head = calls[0].head
        if any(call.head.q_proj is not head.q_proj for call in calls):
            raise ValueError("hidden_step_many: every call must use the same head weights")
        sizes = [call.tokens.numel() for call in calls]
        x, q, k, v = head.attention_inputs(
            torch.cat([c.tokens for c in calls]),
            torch.cat([c.features for c in calls]),
            torch.cat([c.positions for c in calls]),
        )
        gqa = head.config.num_key_value_heads != head.config.num_attention_heads
        attn = []
        for call, qi, ki, vi in zip(calls, q.split(sizes), k.split(sizes), v.split(sizes)):
            owner = call.head
            if owner.k_cache is not None and owner.k_cache.shape[0]:
                assert owner.v_cache is not None  # set together with k_cache
                ki, vi = torch.cat([owner.k_cache, ki]), torch.cat([owner.v_cache, vi])
            owner.k_cache, owner.v_cache = ki, vi
            attn.append(
                F.scaled_dot_product_attention(
                    qi.transpose(0, 1), ki.transpose(0, 1), vi.transpose(0, 1), attn_mask=call.mask, enable_gqa=gqa
                ).transpose(0, 1)
            )
        return list(head.attention_outputs(x, torch.cat(attn)).split(sizes))

    @property
    def draft_token_ids(self) -> torch.Tensor | None:
        """The target token of each `draft_logits` column (None: the target's own vocabulary)."""
        return self.d2t if self.lm_head is not None else None

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (the target's when no reduced vocabulary is set)."""
        normed = _rms_norm(hidden, self.final_norm, self.config.rms_norm_eps)
        if self.lm_head is None:
            return (normed.to(self._target_lm_head.dtype) @ self._target_lm_head.T).float()
        packed = self._packed()
        if packed is None:
            return self.lm_head(normed).float()
        assert packed.lm_head is not None  # packed from this head, which has an lm_head
        return packed.lm_head(normed).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the target vocabulary; tokens outside the draft vocabulary get -inf."""
        draft = self.draft_logits(hidden)
        if self.lm_head is None:
            return draft
        out = torch.full((*draft.shape[:-1], self.config.vocab_size), float("-inf"), device=draft.device)
        return out.index_copy_(-1, self.d2t, draft)

    # ---- checkpoints --------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        write_checkpoint(folder, self.config.to_dict(), self.state_dict())

    @classmethod
    def load(
        cls, folder: str | Path, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor, num_target_layers: int
    ) -> EagleHead:
        config = EagleHeadConfig.from_dict(read_config(folder, "eagle head"))
        config.check_target(
            hidden_size=embed_weight.shape[1], vocab_size=embed_weight.shape[0], num_layers=num_target_layers
        )
        head = cls(config, embed_weight, lm_head_weight)
        state = read_weights(folder, "eagle head")
        expected = head.state_dict()
        wrong = [
            f"{k} {tuple(v.shape)} (config: {tuple(expected[k].shape)})"
            for k, v in state.items()
            if k in expected and v.shape != expected[k].shape
        ]
        if wrong:
            raise ConfigError(f"eagle head: weights do not match {CONFIG_NAME}: " + "; ".join(wrong))
        missing, unexpected = head.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ConfigError(f"eagle head: weights do not match config (missing {missing}, unexpected {unexpected})")
        if head.lm_head is not None:
            d2t = head.d2t
            if bool((d2t < 0).any()) or bool((d2t >= config.vocab_size).any()) or d2t.unique().numel() != d2t.numel():
                raise ConfigError(
                    f"eagle head: d2t (the draft-to-target token map) must hold {d2t.numel()} distinct "
                    f"target ids in 0..{config.vocab_size - 1}"
                )
        return head.to(embed_weight.dtype)

    @classmethod
    def random(
        cls, config: EagleHeadConfig, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor, seed: int = 0
    ) -> EagleHead:
        """A randomly initialised head (std 0.02), until a trained one is given."""
        gen = torch.Generator().manual_seed(seed)
        head = cls(config, embed_weight, lm_head_weight)
        with torch.no_grad():
            for name, p in head.named_parameters():
                if name.endswith("norm"):
                    continue
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        return head.to(embed_weight.dtype)
