"""One verify step of draft trees inside vLLM's runner: positions, attention, verify, KV commit.

The proposer hands vLLM each tree flattened in topological order (parents before children), so
vLLM schedules it as an ordinary list of speculative tokens with linear KV slots. For requests
whose scheduled drafts are such a tree (`TreeEntry`), this module
  - gives the tree's tokens depth-based RoPE positions (slots stay linear),
  - computes their attention rows with the tree mask, straight from the paged cache: one
    `PagedTreeAttentionPlan` per step (indices and masks), one `run` per layer; vLLM's own kernel
    is told those requests' sequences are only as long as their scheduled rows
    (`skip_tree_rows`), so their rows cost it next to nothing instead of being computed twice,
  - verifies the tree with the shared rules and writes the accepted path where vLLM expects its
    output (accepted tokens, then the bonus, padded with -1),
  - moves the accepted nodes' KV into the slots that follow the prefix in every layer, before the
    scheduler's accounting (which assumes the accepted tokens are the first ones).
Anything else (chains, prefills, requests without a registered tree) is left to vLLM. A flattened
tree that vLLM verifies as a chain is still exact: only its acceptance suffers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from sagespec.common.params import ConfigError
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams
from sagespec.common.speculator import Speculator, Verdict, VerifyCheck
from sagespec.common.step_times import StepTimes
from sagespec.common.tree import DraftTree
from sagespec.kernels.paged_tree_attention import BlockLayout, PagedTreeAttentionPlan, move_slots

from .kv_layout import layer_layout, regions


@dataclass
class TreeEntry:
    req_idx: int
    req_id: str
    start: int  # first row of the request in this step's flat token batch
    scheduled: int  # tokens vLLM scheduled for it (root + drafts)
    prefix_len: int  # tokens with KV before this step (the root's position)
    tree: DraftTree  # the longest prefix of the proposed tree that vLLM scheduled; node 0 = root
    accepted: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return self.tree.num_nodes


@dataclass
class TreeStep:
    """One step's trees, planned once: attention plans (per cache layout), the caches to commit
    accepted KV in, and the step's slot mapping."""

    entries: list[TreeEntry]
    times: StepTimes = field(default_factory=StepTimes)  # the proposer's, where the hooks add their time
    # (id(layout), window, block table) -> plan: layers differ in cache layout, sliding window and,
    # in models with several KV cache groups (full and sliding layers), block tables.
    plans: dict[tuple, PagedTreeAttentionPlan | None] = field(default_factory=dict)
    # (cache, slot mapping) data pointers -> (kv cache, layout, slot mapping): the step's slots in the
    # layer's KV cache group. In hybrid models one cache tensor holds a layer of each group, at
    # each group's own slots.
    caches: dict[tuple[int, int], tuple[torch.Tensor, BlockLayout, torch.Tensor]] = field(default_factory=dict)

    @property
    def branching(self) -> list[TreeEntry]:
        """Entries whose tree is not a chain (a chain's rows are already right in vLLM's output)."""
        return [e for e in self.entries if e.n > e.tree.max_depth + 1]

    def skip_tree_rows(self, common_attn_metadata):
        """vLLM's attention metadata input with every branching tree's sequence cut to its own
        scheduled rows: vLLM's kernel then gives row i of such a request the request's first i + 1
        keys (written, finite, cheap) instead of the prefix, and `fix_attention_rows` writes every
        one of those rows. Requests whose scheduled rows go past their tree keep vLLM's rows."""
        wide = [e for e in self.branching if e.scheduled == e.n]
        if not wide:
            return common_attn_metadata
        seq_lens = common_attn_metadata.seq_lens.clone()
        for e in wide:
            seq_lens[e.req_idx] = e.scheduled
        return dataclasses.replace(common_attn_metadata, seq_lens=seq_lens)

    def plan_for(
        self, layout: BlockLayout, block_table: torch.Tensor, window: int | None
    ) -> PagedTreeAttentionPlan | None:
        key = (id(layout), window, block_table.data_ptr())
        if key not in self.plans:
            wide = self.branching
            self.plans[key] = (
                PagedTreeAttentionPlan.build(
                    layout,
                    [e.tree for e in wide],
                    [e.prefix_len for e in wide],
                    [e.start for e in wide],
                    [block_table[e.req_idx] for e in wide],
                    window=window,
                )
                if wide
                else None
            )
        return self.plans[key]


def truncate_tree(tree: DraftTree, num_nodes: int) -> DraftTree:
    """The first num_nodes nodes: still a tree because parents precede children."""
    if num_nodes == tree.num_nodes:
        return tree
    return DraftTree.from_parents(tree.tokens[:num_nodes].tolist(), tree.parents[:num_nodes].tolist())


def scheduled_prefix(tree: DraftTree, drafts) -> DraftTree:
    """The tree cut where vLLM's scheduled drafts stop following it (vLLM may cut the list, or
    replace it with placeholders); the rest of the scheduled tokens is never accepted."""
    m = 1
    while m < tree.num_nodes and m <= len(drafts) and int(tree.tokens[m]) == int(drafts[m - 1]):
        m += 1
    return truncate_tree(tree, m)


def plan_tree_step(runner, scheduler_output, trees: dict[str, DraftTree], times: StepTimes) -> TreeStep | None:
    """Entries for the scheduled decodes of requests with a registered tree (every request we
    verify ourselves); rewrites their positions to prefix + depth in the runner's position buffer."""
    scheduled = scheduler_output.scheduled_spec_decode_tokens
    if not scheduled or not trees:
        return None
    batch = runner.input_batch
    qsl = runner.query_start_loc.cpu
    entries = []
    for req_id, drafts in scheduled.items():
        tree = trees.get(req_id)
        req_idx = batch.req_id_to_index.get(req_id)
        if tree is None or req_idx is None or not drafts:
            continue
        scheduled_tokens = len(drafts) + 1
        start = int(qsl[req_idx])
        if int(qsl[req_idx + 1]) - start != scheduled_tokens:
            continue  # not a pure decode step of this request
        tree = scheduled_prefix(tree, drafts)
        prefix = int(batch.num_computed_tokens_cpu[req_idx])
        runner.positions[start : start + tree.num_nodes] = prefix + tree.depths.to(runner.positions.dtype)
        entries.append(TreeEntry(req_idx, req_id, start, scheduled_tokens, prefix, tree))
    if not entries:
        return None
    times.tree_steps += 1
    return TreeStep(entries, times)


def unsupported_attention(layer) -> str | None:
    """What in an attention layer (an entry of vLLM's forward context) tree verification cannot
    reproduce exactly, or None. It reproduces vLLM's CPU attention of decoder self-attention, with
    sliding windows and logit soft-capping; not ALiBi, attention sinks, other attention types or
    layers that are not attention at all (state-space mixers, linear attention)."""
    impl = getattr(layer, "impl", None)
    if type(impl).__name__ != "CPUAttentionBackendImpl":
        return f"{type(layer).__name__} layers (attention backend {type(impl).__name__})"
    if impl.alibi_slopes is not None:
        return "ALiBi position biases"
    if getattr(impl, "sinks", None) is not None:
        return "attention sinks"
    attn_type = str(getattr(impl, "attn_type", "decoder"))
    if attn_type.lower().rsplit(".", 1)[-1] != "decoder":
        return f"{attn_type} attention"
    return None


def refuse_unsupported_attention(forward_context: dict) -> None:
    """At startup, for a tree policy: a ConfigError naming the first layer whose attention trees
    cannot reproduce, and what runs instead."""
    for name, layer in forward_context.items():
        feature = unsupported_attention(layer)
        if feature is not None:
            raise ConfigError(
                f"sagespec: SAGE trees cannot be verified exactly on this model: {name} uses "
                f'{feature}; use "policy": "chain" (chains are verified with vLLM\'s own '
                "attention)"
            )


def layer_window(impl) -> int | None:
    window = impl.sliding_window
    return None if window in (None, -1) else int(window)


def fix_attention_rows(step: TreeStep, impl, layer, query, kv_cache, attn_metadata, output) -> None:
    """Overwrite the tree requests' attention rows (vLLM computed them chain-causal). vLLM has
    written the step's K and V into the cache already, so the plan reads everything from there.
    Layers `unsupported_attention` names never get here: trees are refused at startup."""
    layout = layer_layout(layer, kv_cache)
    slot_mapping = attn_metadata.slot_mapping
    step.caches.setdefault((kv_cache.data_ptr(), slot_mapping.data_ptr()), (kv_cache, layout, slot_mapping))
    plan = step.plan_for(layout, attn_metadata.block_table, layer_window(impl))
    if plan is not None:
        plan.run(query, regions(kv_cache), output, scale=impl.scale, softcap=impl.logits_soft_cap or 0.0)


def request_sampling(batch, req_idx: int) -> SamplingParams:
    temperature = float(batch.temperature_cpu[req_idx])
    if temperature <= 0.0:
        return SamplingParams()
    top_k = int(batch.top_k_cpu[req_idx])
    top_p = float(batch.top_p_cpu[req_idx])
    return SamplingParams(temperature=temperature, top_k=top_k if 0 < top_k < batch.vocab_size else 0, top_p=top_p)


def verify_trees(
    step: TreeStep,
    runner,
    speculator: Speculator,
    logits: torch.Tensor,
    starts: dict[int, int],
    hidden: torch.Tensor | None = None,
) -> list[Verdict]:
    """Verifies every tree of the step (before vLLM's sampler, which may scale logits in place),
    each request with its own sampling and generator; `hidden`: the final hidden state of every
    logits row, for rules that read them."""
    batch = runner.input_batch
    checks = []
    for e in step.entries:
        # The request's own generator when it has a seed, else torch's global one (seeded by vLLM).
        generator = batch.generators.get(e.req_idx, torch.default_generator)
        rows = None if hidden is None else hidden[starts[e.req_idx] : starts[e.req_idx] + e.n].float()
        checks.append(VerifyCheck(request_sampling(batch, e.req_idx), TorchRandom(generator=generator), rows))
    return speculator.verify([e.tree for e in step.entries], logits, [starts[e.req_idx] for e in step.entries], checks)


def commit_verdicts(
    step: TreeStep, verdicts: list[Verdict], sampler_output, entropies: torch.Tensor, starts: dict[int, int]
) -> None:
    """Writes each tree's accepted path + bonus into vLLM's sampler output (padded with -1), its
    entropy where the bonus was sampled, and moves the accepted nodes' KV behind the prefix."""
    ids = sampler_output.sampled_token_ids
    src, dst = [], []
    for e, verdict in zip(step.entries, verdicts):
        e.accepted = verdict.accepted.nodes
        ids[e.req_idx].fill_(-1)
        ids[e.req_idx, : len(verdict.emitted)] = torch.tensor(verdict.emitted, dtype=ids.dtype)
        entropies[starts[e.req_idx] + len(verdict.emitted) - 1] = verdict.entropy
        for depth, node in enumerate(e.accepted[1:], start=1):
            if node != depth:
                src.append(e.start + node)
                dst.append(e.start + depth)
    if not src:
        return
    src, dst = torch.tensor(src), torch.tensor(dst)
    indices = {}  # (id(layout), kv heads, slot mapping) -> (source elements, destination elements), K and V
    for kv_cache, layout, slot_mapping in step.caches.values():
        key = (id(layout), kv_cache.shape[1], slot_mapping.data_ptr())
        if key not in indices:
            slots = slot_mapping.long()
            indices[key] = tuple(torch.cat(layout.element_indices(slots[rows], key[1])) for rows in (src, dst))
        move_slots(kv_cache.view(-1), *indices[key])


def has_engine_watermark(vllm_config) -> bool:
    """Whether the engine has a watermark configured (then only vLLM's sampler may decode)."""
    return getattr(vllm_config, "watermark_config", None) is not None


def decodes_greedily(sp) -> bool:
    """Whether vLLM decodes a request with sampling params `sp` greedily (its own threshold)."""
    return sp is not None and sp.temperature < 1e-5


def draft_mode(sp, engine_watermark: bool = False) -> str:
    """One of step_view.DRAFT_MODES for a request with vLLM sampling params `sp`, in an engine
    with (`engine_watermark`) or without a watermark configured."""
    if sp is None:
        return "off"
    if not needs_vllm_sampler(sp, engine_watermark):
        return "ours"
    return "vllm_chain" if decodes_greedily(sp) else "off"


def needs_vllm_sampler(sp, engine_watermark: bool = False) -> bool:
    """Options that only vLLM's own sampler applies (logits processors, penalties, grammars,
    logprobs, the engine's watermark). `sp.watermarking` alone means nothing without an engine
    watermark: vLLM 0.31 defaults it to True, 0.32 to None (resolved per engine)."""
    return bool(
        sp.structured_outputs is not None
        or sp.logprobs is not None
        or sp.presence_penalty
        or sp.frequency_penalty
        or sp.repetition_penalty != 1.0
        or sp.min_p
        or sp.min_tokens
        or sp.logit_bias
        or sp.allowed_token_ids
        or sp.bad_words
        or sp.thinking_token_budget
        or (engine_watermark and getattr(sp, "watermarking", None) is not False)
        or getattr(sp, "logprob_token_ids", None)
    )


class ActiveStep:
    """The tree step being executed (set by the runner's input preparation, read by attention)."""

    current: TreeStep | None = None
