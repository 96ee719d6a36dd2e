"""Medusa heads: trees drawn head by head, greedy identity, exact sampling, checkpoints, training,
and the vLLM export."""

import json

import pytest
import torch
from distribution_stats import chi_square_pvalue
from tiny_models import tiny_llama
from tiny_sampling import V_SMALL, exact_pair_distribution, generator, greedy_oracle, sample_pairs

from sagespec.common.drafters import DraftContext, MedusaDrafter, MedusaHeads
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES, TreeShape, make_policy
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams
from sagespec.common.training.eagle_trainer import FeatureSet
from sagespec.common.training.medusa_trainer import (
    MedusaTrainConfig,
    draft_labels,
    head_accuracy,
    train_medusa_heads,
)

PROMPT = [1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3]


def random_heads(model, num_heads=3, seed=1, draft_vocab=None):
    heads = MedusaHeads.for_target(model.config, model.lm_head.weight, num_heads, 1, draft_vocab)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.blocks.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return heads


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0)


@pytest.fixture(scope="module")
def oracle(target):
    return greedy_oracle(target, PROMPT, 40)


def test_each_depth_draws_from_its_own_head(target):
    heads = random_heads(target, num_heads=3)
    drafter = MedusaDrafter(heads)
    feats = torch.randn(4, target.config.hidden_size)
    tokens = torch.tensor([1, 2, 3, 4, 5])
    tree = drafter.propose(
        DraftContext(tokens, feats), TreeShape(depth=5, width=2, budget=64), SamplingParams(), TorchRandom(0)
    )
    logits = heads.draft_logits(feats[-1])
    assert tree.max_depth == 3  # capped at the heads' reach
    for node in range(1, tree.num_nodes):
        depth = int(tree.depths[node])
        siblings = [int(tree.tokens[c]) for c in tree.children(int(tree.parents[node]))]
        best = torch.topk(logits[depth - 1], len(siblings)).indices.tolist()
        assert siblings == best, f"children at depth {depth} are not head {depth - 1}'s top picks"


def test_draft_vocabulary_maps_back_to_target_ids(target):
    vocab = torch.tensor([3, 8, 20, 41, 60, 77])
    heads = random_heads(target, num_heads=2, draft_vocab=vocab)
    tree = MedusaDrafter(heads).propose(
        DraftContext(torch.tensor([1, 2]), torch.randn(1, target.config.hidden_size)),
        TreeShape(depth=2, width=3, budget=9),
        SamplingParams(),
        TorchRandom(0),
    )
    assert set(tree.tokens[1:].tolist()) <= set(vocab.tolist()) and tree.num_drafted == 9


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_greedy_identity(target, oracle, policy):
    gen = generator(target, MedusaDrafter(random_heads(target)), make_policy(policy))
    res = gen.generate(PROMPT, 40)
    assert res.tokens == oracle
    assert max(res.nodes_per_step) > 1


def test_sampling_matches_target_distribution():
    target = tiny_llama(vocab_size=V_SMALL, seed=3, init_std=0.15)
    exact = exact_pair_distribution(target, [1, 2, 3])
    counts = sample_pairs(target, MedusaDrafter(random_heads(target, seed=5)), make_policy("sage"), "auto", 1200)
    assert chi_square_pvalue(counts.flatten(), exact.flatten()) > 1e-3


def test_checkpoint_round_trip_and_bad_targets(target, tmp_path):
    heads = random_heads(target, draft_vocab=torch.tensor([4, 9, 2, 30]))
    heads.save(tmp_path / "h")
    back = MedusaHeads.load(tmp_path / "h", target.lm_head.weight, target.config.num_hidden_layers)
    x = torch.randn(3, target.config.hidden_size)
    assert torch.equal(back.draft_logits(x), heads.draft_logits(x))
    with pytest.raises(ConfigError, match="hidden_size 64 \\(target: 32\\)"):
        MedusaHeads.load(tmp_path / "h", torch.zeros(96, 32), target.config.num_hidden_layers)
    with pytest.raises(ConfigError, match="num_target_layers 2 \\(target: 5\\)"):
        MedusaHeads.load(tmp_path / "h", target.lm_head.weight, 5)
    with pytest.raises(ConfigError, match=r"has no config\.json"):
        MedusaHeads.load(tmp_path / "nothing", target.lm_head.weight, 2)
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    (tmp_path / "h" / "config.json").write_text(json.dumps({**cfg, "num_heads": 0}))
    with pytest.raises(ConfigError, match="num_heads=0 must be an integer >= 1"):
        MedusaHeads.load(tmp_path / "h", target.lm_head.weight, 2)


def test_labels_are_the_tokens_two_and_more_ahead():
    tokens = torch.tensor([[5, 6, 7, 8, 9, 0]])
    labels = draft_labels(tokens, torch.tensor([5]), 2, torch.tensor([5, 6, 7, 8, 9]), 12)
    # head 0 at position t: token t + 2 (columns: draft ids); past the length: -100
    assert labels[0, 0].tolist() == [2, 3, 4, -100, -100, -100]
    assert labels[1, 0].tolist() == [3, 4, -100, -100, -100, -100]


def test_training_learns_a_predictable_stream():
    """Sequences that repeat a fixed cycle: the heads must learn tokens t+2, t+3 from the target's
    final hidden state (which sees the token at t)."""
    cycle = [3, 17, 42, 8, 25, 60]
    seqs = torch.tensor([[cycle[(i + s) % 6] for i in range(40)] for s in range(24)])
    target = tiny_llama(seed=0)
    with torch.no_grad():
        final = target.model(input_ids=seqs).last_hidden_state
    data = FeatureSet(final, final, seqs, torch.full((24,), 40))
    heads = MedusaHeads.for_target(target.config, target.lm_head.weight.detach(), 2, 1)
    before = head_accuracy(heads, data)
    train_medusa_heads(heads, data, MedusaTrainConfig(lr=3e-3, batch_size=8, positions=256, max_tokens=60_000))
    after = head_accuracy(heads, data)
    assert all(a > 0.95 for a in after), (before, after)
    assert all(b < 0.5 for b in before)
