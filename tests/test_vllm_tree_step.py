"""The vLLM plugin's tree step on constructed inputs (no engine): which scheduled decodes become
tree entries and where their positions go, verification with each request's sampling, the
accepted path written into the sampler's output, and the accepted nodes' K/V moved behind the
prefix in a paged cache."""

from dataclasses import dataclass, replace
from types import SimpleNamespace

import torch
from test_paged_tree_attention import HKV, vec_layout, write

from sagespec.common.policies import ChainPolicy
from sagespec.common.speculator import Speculator
from sagespec.common.step_times import StepTimes
from sagespec.common.tree import DraftTree
from sagespec.common.verify.acceptance import Acceptance
from sagespec.plugins.vllm.tree_step import (
    commit_verdicts,
    decodes_greedily,
    draft_mode,
    plan_tree_step,
    scheduled_prefix,
    truncate_tree,
    verify_trees,
)

VOCAB = 32
# Request "a": a branching tree; "b": a prefill chunk; "c": a tree vLLM cut to two drafts;
# "d": drafts without a registered tree (vLLM verifies those itself).
TREE_A = DraftTree.from_parents([5, 1, 2, 3, 4], [-1, 0, 0, 1, 2])  # depths 0 1 1 2 2
TREE_C = DraftTree.from_parents([6, 7, 8, 9], [-1, 0, 1, 2])


def runner_for_step():
    # Flat rows: a = 0..4 (root + 4 drafts), b = 5..10 (prefill), c = 11..13, d = 14..16.
    batch = SimpleNamespace(
        req_id_to_index={"a": 0, "b": 1, "c": 2, "d": 3},
        num_computed_tokens_cpu=torch.tensor([40, 0, 17, 9]),
        generators={},
        temperature_cpu=torch.zeros(4),
        top_k_cpu=torch.zeros(4, dtype=torch.long),
        top_p_cpu=torch.ones(4),
        vocab_size=VOCAB,
    )
    return SimpleNamespace(
        input_batch=batch,
        query_start_loc=SimpleNamespace(cpu=torch.tensor([0, 5, 11, 14, 17])),
        positions=torch.full((17,), -7, dtype=torch.long),
    )


def scheduler_output():
    return SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2, 3, 4], "c": [7, 8], "d": [1, 1]})


def test_plan_tree_step_takes_registered_decodes_and_sets_depth_positions():
    runner, times = runner_for_step(), StepTimes()
    step = plan_tree_step(runner, scheduler_output(), {"a": TREE_A, "c": TREE_C}, times)
    assert [(e.req_id, e.req_idx, e.start, e.scheduled, e.prefix_len, e.n) for e in step.entries] == [
        ("a", 0, 0, 5, 40, 5),
        ("c", 2, 11, 3, 17, 3),  # cut where vLLM's list stops
    ]
    assert runner.positions[:5].tolist() == [40, 41, 41, 42, 42]  # prefix + depth, not prefix + row
    assert runner.positions[11:14].tolist() == [17, 18, 19]
    assert (runner.positions[5:11] == -7).all() and (runner.positions[14:] == -7).all()  # untouched
    assert times.tree_steps == 1
    assert [e.req_id for e in step.branching] == ["a"]  # c is a chain: vLLM's rows are right


@dataclass
class CommonMetadata:  # the fields of vLLM's CommonAttentionMetadata the tree step reads
    seq_lens: torch.Tensor
    max_seq_len: int


def test_skip_tree_rows_cuts_only_whole_branching_trees():
    runner = runner_for_step()
    tree_a_cut = DraftTree.from_parents([5, 1, 2], [-1, 0, 0])  # branching, but vLLM scheduled 4 drafts
    seq_lens = torch.tensor([45, 6, 20, 12], dtype=torch.int32)
    common = CommonMetadata(seq_lens, 45)
    whole = plan_tree_step(runner, scheduler_output(), {"a": TREE_A, "c": TREE_C}, StepTimes())
    cut = whole.skip_tree_rows(common)
    assert cut.seq_lens.tolist() == [5, 6, 20, 12]  # a: its 5 rows; c (a chain) and the rest: vLLM's own
    assert cut.max_seq_len == 45 and cut.seq_lens.dtype == torch.int32
    assert seq_lens.tolist() == [45, 6, 20, 12]  # the runner's own tensor is left as it was
    partial = plan_tree_step(runner, scheduler_output(), {"a": tree_a_cut, "c": TREE_C}, StepTimes())
    assert partial.entries[0].n == 3 and partial.entries[0].scheduled == 5
    assert partial.skip_tree_rows(common) is common  # rows past the tree: vLLM computes every row


def test_plan_tree_step_skips_steps_without_trees():
    runner = runner_for_step()
    assert plan_tree_step(runner, SimpleNamespace(scheduled_spec_decode_tokens={}), {"a": TREE_A}, StepTimes()) is None
    assert plan_tree_step(runner, scheduler_output(), {}, StepTimes()) is None
    # a request whose rows are not exactly root + drafts (a chunk) is not a tree step
    chunk = SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2]})
    assert plan_tree_step(runner, chunk, {"a": TREE_A}, StepTimes()) is None
    assert (runner.positions == -7).all()


def greedy_logits(rows, argmax):
    logits = torch.zeros(rows, VOCAB)
    for row, token in argmax.items():
        logits[row, token] = 5.0
    return logits


def test_verify_and_commit_write_the_accepted_path_and_move_its_kv():
    runner = runner_for_step()
    step = plan_tree_step(runner, scheduler_output(), {"a": TREE_A, "c": TREE_C}, StepTimes())
    starts = {0: 0, 2: 11}
    # a: the target follows node 2 (token 2) then node 4 (token 4), bonus 9; c: rejects token 7, emits 3.
    logits = greedy_logits(17, {0: 2, 2: 4, 4: 9, 11: 3})
    speculator = Speculator(ChainPolicy, None, Acceptance("greedy"))
    verdicts = verify_trees(step, runner, speculator, logits, starts)
    assert [v.emitted for v in verdicts] == [[2, 4, 9], [3]]
    assert [v.accepted.nodes for v in verdicts] == [(0, 2, 4), (0,)]

    # A paged cache whose step rows sit at scattered slots; a's accepted nodes 2 and 4 must land
    # in the slots of rows 1 and 2 (right behind the prefix), in K and in V; nothing else moves.
    layout, num_blocks = vec_layout(), 8
    kv = torch.zeros(num_blocks, HKV, layout.block_size, 2 * layout.head_dim)
    slots = torch.randperm(num_blocks * layout.block_size, generator=torch.Generator().manual_seed(0))[:17]
    k = torch.randn(17, HKV, layout.head_dim)
    v = torch.randn(17, HKV, layout.head_dim)
    write(kv.view(-1), layout, slots, k, v)
    step.caches[(kv.data_ptr(), slots.data_ptr())] = (kv, layout, slots)
    before = kv.clone()
    sampled = torch.zeros(4, 5, dtype=torch.long)
    entropies = torch.zeros(17)
    verdicts = [replace(verdict, entropy=value) for verdict, value in zip(verdicts, (0.25, 0.5))]
    commit_verdicts(step, verdicts, SimpleNamespace(sampled_token_ids=sampled), entropies, starts)

    assert sampled[0].tolist() == [2, 4, 9, -1, -1] and sampled[2].tolist() == [3, -1, -1, -1, -1]
    assert sampled[1].tolist() == [0] * 5 and sampled[3].tolist() == [0] * 5  # not ours
    assert entropies[2] == 0.25 and entropies[11] == 0.5 and entropies.count_nonzero() == 2
    assert [e.accepted for e in step.entries] == [(0, 2, 4), (0,)]
    ki, vi = layout.element_indices(slots, HKV)
    got_k, got_v = kv.view(-1)[ki].view(17, HKV, -1), kv.view(-1)[vi].view(17, HKV, -1)
    moved_k, moved_v = k.clone(), v.clone()
    moved_k[1], moved_k[2], moved_v[1], moved_v[2] = k[2], k[4], v[2], v[4]
    assert torch.equal(got_k, moved_k) and torch.equal(got_v, moved_v)
    untouched = torch.ones(kv.numel(), dtype=torch.bool)
    bi, bv = layout.element_indices(slots[1:3], HKV)
    untouched[bi], untouched[bv] = False, False
    assert torch.equal(kv.view(-1)[untouched], before.view(-1)[untouched])


def test_truncated_tree_is_a_tree():
    tree = DraftTree.from_parents([9, 1, 2, 3, 4, 5], [-1, 0, 0, 1, 1, 2])
    cut = truncate_tree(tree, 4)
    assert cut.tokens.tolist() == [9, 1, 2, 3] and cut.parents.tolist() == [-1, 0, 0, 1]
    assert truncate_tree(tree, 6) is tree


def test_scheduled_prefix_stops_where_vllm_diverges():
    tree = DraftTree.from_parents([9, 1, 2, 3, 4], [-1, 0, 0, 1, 2])
    assert scheduled_prefix(tree, [1, 2, 3, 4]).num_nodes == 5
    assert scheduled_prefix(tree, [1, 2]).num_nodes == 3  # vLLM cut the list
    assert scheduled_prefix(tree, [0, 0, 0, 0]).num_nodes == 1  # zeroed drafts: the root alone
    assert scheduled_prefix(tree, [-1, -1]).num_nodes == 1  # placeholders


def test_draft_mode_by_request_options():
    plain = dict(
        structured_outputs=None,
        logprobs=None,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        repetition_penalty=1.0,
        min_p=0.0,
        min_tokens=0,
        logit_bias=None,
        allowed_token_ids=None,
        bad_words=None,
        thinking_token_budget=None,
    )
    assert draft_mode(SimpleNamespace(temperature=0.0, **plain)) == "ours"
    assert draft_mode(SimpleNamespace(temperature=1.0, **plain)) == "ours"
    assert draft_mode(SimpleNamespace(temperature=0.0, **{**plain, "logprobs": 2})) == "vllm_chain"
    assert draft_mode(SimpleNamespace(temperature=0.7, **{**plain, "repetition_penalty": 1.1})) == "off"
    assert draft_mode(None) == "off"
    # vLLM 0.31 defaults `watermarking` to True; it matters only in an engine with a watermark.
    assert draft_mode(SimpleNamespace(temperature=0.0, watermarking=True, **plain)) == "ours"
    assert draft_mode(SimpleNamespace(temperature=0.0, watermarking=True, **plain), True) == "vllm_chain"
    assert draft_mode(SimpleNamespace(temperature=0.0, watermarking=False, **plain), True) == "ours"
    assert draft_mode(SimpleNamespace(temperature=1.0, watermarking=None, **plain), True) == "off"


def test_greedy_is_vllms_own_threshold():
    assert decodes_greedily(SimpleNamespace(temperature=0.0))
    assert decodes_greedily(SimpleNamespace(temperature=1e-6))
    assert not decodes_greedily(SimpleNamespace(temperature=0.7))
    assert not decodes_greedily(None)
