"""The target's attention over a prompt's image rows, read inside vLLM's own prefill.

For vision drafters that prune by attention: in the step that finishes a request's prompt, at the
text model's middle attention layer, the attention of the prompt's last position over all its
positions (mean over heads) is computed from that layer's query row and keys (the cached prefix
from vLLM's paged KV plus this step's keys), the same quantity the reference runtime reads. The
plan is made with the step's inputs and read by the attention hook; results wait for the proposer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sagespec.kernels import row_attention

from .kv_layout import layer_layout, regions


@dataclass
class SaliencyProbe:
    layer_name: str
    rows: dict = field(default_factory=dict)  # req_id -> (req_idx, last query row, prefix_len, length)
    results: dict = field(default_factory=dict)  # req_id -> attention [length] over the prompt


class ActiveSaliency:
    current: SaliencyProbe | None = None


def plan_saliency(runner, scheduler_output, proposer) -> SaliencyProbe | None:
    """Requests whose prompt ends in this step and whose drafter wants the target's attention."""
    name = getattr(proposer, "saliency_layer_name", None)
    if name is None:
        return None
    batch, qsl = runner.input_batch, runner.query_start_loc.cpu
    probe = SaliencyProbe(name)
    for req_id, scheduled in scheduler_output.num_scheduled_tokens.items():
        state, req_idx = runner.requests.get(req_id), batch.req_id_to_index.get(req_id)
        if state is None or req_idx is None or not proposer.wants_images(req_id):
            continue
        computed = int(batch.num_computed_tokens_cpu[req_idx])
        if computed + scheduled != state.num_prompt_tokens or not any(f.modality == "image" for f in state.mm_features):
            continue
        probe.rows[req_id] = (req_idx, int(qsl[req_idx + 1]) - 1, computed, computed + scheduled)
    return probe if probe.rows else None


def record_attention(probe: SaliencyProbe, impl, layer, query, key, kv_cache, attn_metadata) -> None:
    """At the probe's layer: each planned request's last-row attention over its prompt."""
    if getattr(layer, "layer_name", None) != probe.layer_name:
        return
    layout = layer_layout(layer, kv_cache)
    for req_id, (req_idx, last, prefix, length) in probe.rows.items():
        first = last - (length - prefix) + 1
        keys = key[first : last + 1]
        if prefix:
            k_prefix, _ = layout.gather_prefix(regions(kv_cache), attn_metadata.block_table[req_idx], prefix)
            keys = torch.cat([k_prefix, keys])
        probe.results[req_id] = row_attention(query[last], keys, impl.scale).cpu()
