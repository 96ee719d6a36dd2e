"""Self-speculative drafts: the target with layers skipped, sharing its cache and weights;
calibration, greedy identity, exact sampling, bad input."""

import copy

import pytest
import torch
from distribution_stats import chi_square_pvalue
from tiny_models import tiny_gemma3, tiny_llama
from tiny_sampling import V_SMALL, exact_pair_distribution, generator, greedy_oracle, sample_pairs

from sagespec.common.drafters import SelfDrafter, SelfLevel, calibrate_levels, check_fractions, check_skip
from sagespec.common.params import ConfigError
from sagespec.common.policies import POLICIES, make_policy
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins._layer_skip import skipping_layers
from sagespec.plugins.transformers.self_calibration import calibrate_self, greedy_continuations

PROMPT = [1, 5, 7, 9, 5, 7, 9, 5, 7, 11, 3]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, layers=4)


@pytest.fixture(scope="module")
def oracle(target):
    return greedy_oracle(target, PROMPT, 40)


def level(*skip):
    return SelfLevel(frozenset(skip), agreement=0.5, cost=0.5)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_greedy_identity(target, oracle, policy):
    gen = generator(target, SelfDrafter([level(2)], 4), make_policy(policy))
    res = gen.generate(PROMPT, 40)
    assert res.tokens == oracle
    assert max(res.nodes_per_step) > 1


def test_skipping_nothing_drafts_the_target_itself(target):
    """With no layer skipped the draft is the target: every chain draft is accepted."""
    gen = generator(target, SelfDrafter([level()], 4), make_policy("chain"))
    res = gen.generate(PROMPT, 40)
    drafted = [n + 1 for n in res.nodes_per_step]
    assert res.accepted_per_step[1:-1] == drafted[:-1]


def test_skipped_layers_write_no_cache_and_drafting_leaves_the_cache_as_it_was(target):
    lm = HFTreeLM(target)
    lm.forward(torch.tensor(PROMPT), torch.arange(len(PROMPT)), torch.ones(len(PROMPT), len(PROMPT)).tril().bool())
    before = [layer.keys.clone() for layer in lm.cache.layers]
    n = len(PROMPT)
    lm.forward_skipping(torch.tensor([3]), torch.tensor([n]), torch.ones(1, n + 1, dtype=torch.bool), frozenset({1, 3}))
    assert [layer.keys.shape[2] for layer in lm.cache.layers] == [n + 1, n, n + 1, n]
    lm.truncate(n)
    assert all(torch.equal(a, layer.keys) for a, layer in zip(before, lm.cache.layers))
    assert all(type(layer).__name__ != "_SkippedLayer" for layer in target.model.layers)


@pytest.mark.parametrize("skip", [1, 2])
def test_layer_skipping_keeps_per_layer_attention_types(skip):
    """Gemma 3 alternates sliding and global layers by index: skipping one must equal a model whose
    layer writes nothing to the residual stream (its output projections zeroed), every other layer
    keeping its own attention type. The prompt is longer than the window."""
    model = tiny_gemma3(sliding_window=4)
    reference = copy.deepcopy(model)
    layer = reference.model.layers[skip]
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        with skipping_layers(model, frozenset({skip})):
            skipped = model(input_ids=ids).logits
        full = model(input_ids=ids).logits
    torch.testing.assert_close(skipped, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(full, skipped)


def test_sampling_matches_target_distribution():
    target = tiny_llama(vocab_size=V_SMALL, seed=3, init_std=0.15, layers=3)
    exact = exact_pair_distribution(target, [1, 2, 3])
    for sampled in (False, True):
        drafter = SelfDrafter([level(1)], 3, sample_children=sampled)
        counts = sample_pairs(target, drafter, make_policy("sage"), "auto", 1200)
        assert chi_square_pvalue(counts.flatten(), exact.flatten()) > 1e-3, f"sample_children={sampled}"


def test_calibration_skips_the_least_important_layers():
    importance = {1: 0.9, 2: 0.2, 3: 0.6, 4: 0.1, 5: 0.4}  # agreement when that layer alone is skipped
    seen = []

    def agreement(skip):
        seen.append(skip)
        return min(importance[i] for i in skip) if len(skip) == 1 else 0.5 ** len(skip)

    levels = calibrate_levels(7, agreement, lambda skip: 1 - len(skip) / 7, fractions=(0.15, 0.3))
    assert [sorted(lv.skip) for lv in levels] == [[1], [1, 3]]
    assert levels[1].agreement == 0.25 and levels[1].cost == pytest.approx(5 / 7)
    assert frozenset({0}) not in seen and frozenset({6}) not in seen  # first and last always run


def test_calibration_on_a_real_target(target):
    texts = greedy_continuations(target, [PROMPT, [2, 3, 4, 5]], 12)
    levels = calibrate_self(HFTreeLM(target), texts, (0.25, 0.5), show_progress=False)
    assert [len(lv.skip) for lv in levels] == [1, 2]
    assert all(0.0 <= lv.agreement <= 1.0 and lv.cost > 0.0 for lv in levels)


def test_bad_input_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"skip layers \[0\] are not in 1..3"):
        check_skip([0], 4)
    with pytest.raises(ConfigError, match=r"skip layers \[0\] .*layer 0 always runs"):
        check_skip(range(4), 4)  # a set that would leave no layer
    with pytest.raises(ConfigError, match=r"skip layers \[7\]"):
        check_skip([1, 7], 4)
    with pytest.raises(ConfigError, match=r"levels \[0\.5, 1\.5\] must be shares"):
        check_fractions([0.5, 1.5])
    with pytest.raises(ConfigError, match="no levels"):
        SelfDrafter([], 4)
    with pytest.raises(ConfigError, match="calibrated for 4 layers; the target has 2"):
        SelfDrafter([level(1)], 4).bind_target(HFTreeLM(tiny_llama()))
    with pytest.raises(ConfigError, match="has none to skip"):
        calibrate_levels(2, lambda s: 1.0, lambda s: 1.0)
