"""A Hugging Face causal LM behind sagespec's TreeLM contract (the reference runtime's target, and
draft models in every runtime): KV cache, arbitrary tree masks,
explicit positions, contiguous commit of accepted KV. Attention runs through
`sagespec.kernels.tree_attention`, registered with transformers' attention interface."""
from __future__ import annotations

import torch

from sagespec.kernels import commit_accepted_kv, row_attention, tree_attention

ATTENTION_NAME = "sagespec_tree"
_backend = {"name": "auto"}
# While `layer` is set, the attention of the last query row at that layer (mean over heads) is kept
# in `weights` [kv]: the target's own attention, read for image-row saliency.
_probe: dict = {"layer": None, "weights": None}




def _hf_tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """query [1, Hq, q, D], key/value [1, Hkv, kv, D] (cache included) -> ([1, q, Hq, D], None)."""
    if query.shape[0] != 1:
        raise ValueError("the reference runtime runs one request at a time")
    q_len, kv_len = query.shape[2], key.shape[2]
    if attention_mask is None:  # plain causal use (e.g. model.generate): the last q rows of a causal mask
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
    else:
        mask = attention_mask[0, 0]
        if mask.dtype != torch.bool:
            mask = mask == 0
    if _probe["layer"] is not None and getattr(module, "layer_idx", None) == _probe["layer"]:
        _probe["weights"] = row_attention(query[0, :, -1], key[0].transpose(0, 1), scaling, mask[-1])
    out = tree_attention(query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
                         torch.tensor([0, q_len]), torch.tensor([0, kv_len]), mask.reshape(-1),
                         sm_scale=scaling, backend=_backend["name"])
    return out.unsqueeze(0), None


def register_attention(backend: str = "auto") -> None:
    from transformers import AttentionInterface
    _backend["name"] = backend
    AttentionInterface.register(ATTENTION_NAME, _hf_tree_attention)


class HFTreeLM:
    def __init__(self, model, hidden_layer_ids=()):
        from transformers import DynamicCache
        register_attention(_backend["name"])
        # The text decoder only: a vision tower's attention is bidirectional and stays the model's own.
        model.get_decoder().set_attn_implementation(ATTENTION_NAME)
        self.model = model
        self.vocab_size = model.config.get_text_config().vocab_size
        self.hidden_layer_ids = tuple(hidden_layer_ids)
        self._cache_cls = DynamicCache
        self.cache = DynamicCache(config=model.config)

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
        out = self.model(**self._inputs(tokens, inputs_embeds), position_ids=positions.view(1, -1).to(dev),
                         attention_mask=mask[None, None].to(dev), past_key_values=self.cache, use_cache=True,
                         output_hidden_states=with_hidden)
        logits = out.logits[0].float()
        if not with_hidden:
            return logits
        return logits, self._layer_feats(out.hidden_states)

    @torch.no_grad()
    def forward_with_last_hidden(self, tokens, positions, mask, with_hidden: bool = False, inputs_embeds=None):
        """(logits [q, V] fp32, chosen layers' features or None, last normed hidden state [q, H]):
        the decoder, then the output layer on its last hidden state, as the LM's own forward does."""
        dev = self.device
        out = self.model.get_decoder()(**self._inputs(tokens, inputs_embeds),
                                       position_ids=positions.view(1, -1).to(dev),
                                       attention_mask=mask[None, None].to(dev), past_key_values=self.cache,
                                       use_cache=True, output_hidden_states=with_hidden)
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
            self.cache = self._cache_cls(config=self.model.config)
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
