"""A Hugging Face causal LM behind sagespec's TreeLM contract (the reference runtime's target, and
draft models in every runtime): KV cache, arbitrary tree masks,
explicit positions, contiguous commit of accepted KV. Attention runs through
`sagespec.kernels.tree_attention`, registered with transformers' attention interface."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from sagespec.common.params import ConfigError
from sagespec.common.tree import within_window
from sagespec.kernels import commit_accepted_kv, row_attention, tree_attention
from sagespec.plugins._layer_skip import skipping_layers

ATTENTION_NAME = "sagespec_tree"
_backend = {"name": "auto"}
# While `layer` is set, the attention of the last query row at that layer (mean over heads) is kept
# in `weights` [kv]: the target's own attention, read for image-row saliency.
_probe: dict = {"layer": None, "weights": None}
# While HFTreeLM runs a forward: its query positions [q]. Cached keys sit at their positions
# (the cache is committed contiguously), so keys are [0 .. kv - q) followed by the queries' own.
_forward: dict = {"positions": None}


def _visible(attention_mask, q_len: int, kv_len: int, device, window: int | None) -> torch.Tensor:
    """[q, kv] bool: the forward's mask (a causal one when none is given), within the layer's window."""
    if attention_mask is None:  # plain causal use (e.g. model.generate): the last q rows of a causal mask
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(kv_len - q_len)
    else:
        mask = attention_mask[0, 0]
        if mask.dtype != torch.bool:
            mask = mask == 0
    if window:
        queries = _forward["positions"]
        if queries is None:
            queries = torch.arange(kv_len - q_len, kv_len)
        keys = torch.cat([torch.arange(kv_len - q_len), queries.cpu()])
        mask = mask & within_window(queries.cpu(), keys, window).to(mask.device)
    return mask


def _softcapped_attention(query, key, value, mask, scaling, softcap):
    """Eager attention with tanh soft-capping of the scores (Gemma 2); query [Hq, q, D], key/value
    [Hkv, kv, D] -> [q, Hq, D]. Softmax in fp32, as transformers' eager path."""
    group = query.shape[0] // key.shape[0]
    key, value = key.repeat_interleave(group, 0), value.repeat_interleave(group, 0)
    scores = torch.tanh(query @ key.transpose(1, 2) * scaling / softcap) * softcap
    probs = scores.masked_fill(~mask, float("-inf")).float().softmax(-1).to(value.dtype)
    return (probs @ value).transpose(0, 1)


def _hf_tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """query [1, Hq, q, D], key/value [1, Hkv, kv, D] (cache included) -> ([1, q, Hq, D], None).
    Honours the layer's `sliding_window` and `softcap` (attention sinks are refused at load)."""
    if query.shape[0] != 1:
        raise ValueError("the reference runtime runs one request at a time")
    q_len, kv_len = query.shape[2], key.shape[2]
    mask = _visible(attention_mask, q_len, kv_len, query.device, kwargs.get("sliding_window"))
    if _probe["layer"] is not None and getattr(module, "layer_idx", None) == _probe["layer"]:
        _probe["weights"] = row_attention(query[0, :, -1], key[0].transpose(0, 1), scaling, mask[-1])
    if kwargs.get("softcap"):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return _softcapped_attention(query[0], key[0], value[0], mask, scale, kwargs["softcap"]).unsqueeze(0), None
    out = tree_attention(
        query[0].transpose(0, 1),
        key[0].transpose(0, 1),
        value[0].transpose(0, 1),
        torch.tensor([0, q_len]),
        torch.tensor([0, kv_len]),
        mask.reshape(-1),
        sm_scale=scaling,
        backend=_backend["name"],
    )
    return out.unsqueeze(0), None


def refuse_unsupported_attention(model) -> None:
    """At load: a ConfigError naming an attention feature tree verification does not reproduce."""
    for name, module in model.get_decoder().named_modules():
        if isinstance(getattr(module, "sinks", None), torch.Tensor):
            raise ConfigError(
                f"sagespec: {name} uses attention sinks, which the reference runtime's tree "
                "attention does not reproduce"
            )


@contextmanager
def _positions_of(positions: torch.Tensor):
    _forward["positions"] = positions.reshape(-1)
    try:
        yield
    finally:
        _forward["positions"] = None


def register_attention(backend: str = "auto") -> None:
    from transformers import AttentionInterface

    _backend["name"] = backend
    AttentionInterface.register(ATTENTION_NAME, _hf_tree_attention)


class HFTreeLM:
    def __init__(self, model, hidden_layer_ids=()):
        from transformers import DynamicCache

        register_attention(_backend["name"])
        # The text decoder only: a vision tower's attention is bidirectional and stays the model's own.
        refuse_unsupported_attention(model)
        decoder = model.get_decoder()
        decoder.set_attn_implementation(ATTENTION_NAME)
        if decoder.config._attn_implementation != ATTENTION_NAME:  # transformers only logs this
            raise ConfigError(
                f"sagespec: {type(decoder).__name__} computes its own attention (not through "
                "transformers' attention interface), so tree attention cannot run in it"
            )
        self.model = model
        self.vocab_size = model.config.get_text_config().vocab_size
        self.num_layers = model.config.get_text_config().num_hidden_layers
        self.hidden_layer_ids = tuple(hidden_layer_ids)
        self._cache_cls = DynamicCache
        self.cache = self._new_cache()

    def _new_cache(self):
        """The model's cache with every sliding-window layer kept whole: a tree's nodes and the accepted
        path are committed by index, and the window is applied in attention instead."""
        from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

        cache = self._cache_cls(config=self.model.config)
        cache.layers = [
            DynamicLayer() if isinstance(layer, DynamicSlidingWindowLayer) else layer for layer in cache.layers
        ]
        return cache

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    @property
    def device(self):
        return self.model.device

    def _inputs(self, tokens, inputs_embeds) -> dict:
        """The model's input: token ids, or (a multimodal prompt) the embeddings to use instead."""
        if inputs_embeds is None:
            return {"input_ids": tokens.view(1, -1).to(self.device)}
        if inputs_embeds.shape[0] != tokens.numel():
            raise ValueError(f"{inputs_embeds.shape[0]} input embeddings for {tokens.numel()} tokens")
        return {"inputs_embeds": inputs_embeds[None].to(self.device, self.model.dtype)}

    @torch.no_grad()
    def forward(self, tokens, positions, mask, with_hidden: bool = False, inputs_embeds=None):
        """Logits [q, V] in fp32; with_hidden also returns the chosen layers' hidden states
        concatenated [q, len(ids) * hidden]. `inputs_embeds` [q, H] replaces the token embeddings."""
        dev = self.device
        with _positions_of(positions):
            out = self.model(
                **self._inputs(tokens, inputs_embeds),
                position_ids=positions.view(1, -1).to(dev),
                attention_mask=mask[None, None].to(dev),
                past_key_values=self.cache,
                use_cache=True,
                output_hidden_states=with_hidden,
            )
        logits = out.logits[0].float()
        if not with_hidden:
            return logits
        return logits, self._layer_feats(out.hidden_states)

    @torch.no_grad()
    def forward_skipping(self, tokens, positions, mask, skip: frozenset[int]):
        """`forward` through the layers not in `skip` (self-speculative drafts): only the kept
        layers' caches grow."""
        with skipping_layers(self.model, skip):
            return self.forward(tokens, positions, mask)

    @torch.no_grad()
    def forward_with_last_hidden(self, tokens, positions, mask, with_hidden: bool = False, inputs_embeds=None):
        """(logits [q, V] fp32, chosen layers' features or None, last normed hidden state [q, H]):
        the decoder, then the output layer on its last hidden state, as the LM's own forward does."""
        dev = self.device
        with _positions_of(positions):
            out = self.model.get_decoder()(
                **self._inputs(tokens, inputs_embeds),
                position_ids=positions.view(1, -1).to(dev),
                attention_mask=mask[None, None].to(dev),
                past_key_values=self.cache,
                use_cache=True,
                output_hidden_states=with_hidden,
            )
        last = out.last_hidden_state
        logits = self.model.get_output_embeddings()(last)[0].float()
        feats = self._layer_feats(out.hidden_states) if with_hidden else None
        return logits, feats, last[0]

    def last_row_attention(self, layer: int, run):
        """Calls `run()` (a forward) and returns the attention [kv] of its last query row at `layer`,
        averaged over heads, as the model computed it."""
        _probe.update(layer=layer, weights=None)
        try:
            result = run()
        finally:
            weights, _probe["layer"] = _probe["weights"], None
        if weights is None:
            raise ValueError(f"no attention was seen at layer {layer}")
        return result, weights

    def _layer_feats(self, hidden_states) -> torch.Tensor:
        return torch.cat([hidden_states[i][0] for i in self.hidden_layer_ids], -1)

    def truncate(self, length: int) -> None:
        if length == 0:
            self.cache = self._new_cache()
            return
        for layer in self.cache.layers:
            layer.keys = layer.keys[:, :, :length]
            layer.values = layer.values[:, :, :length]

    def commit(self, prefix_len: int, accepted) -> None:
        """Keep the prefix plus the accepted tree nodes (root first), contiguously."""
        for layer in self.cache.layers:
            commit_accepted_kv(layer.keys, prefix_len, accepted, dim=2)
            commit_accepted_kv(layer.values, prefix_len, accepted, dim=2)
        self.truncate(prefix_len + len(accepted))
