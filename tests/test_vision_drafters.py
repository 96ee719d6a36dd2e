"""Vision-aware drafters in the reference runtime, on a tiny random LLaVA model: greedy identity
against transformers' own image+text `generate`, the compressed draft cache (its length and the
positions of what it keeps), the target-attention saliency, and the text-only fallback."""

import copy
import warnings

import pytest
import torch
from tiny_models import TINY_IMAGE_TOKEN, tiny_llava

from sagespec.common.drafters import (
    EagleDrafter,
    EagleHead,
    EagleHeadConfig,
    ImageInputs,
    VisionConfig,
    VisionDrafter,
    VisionModules,
)
from sagespec.common.params import ConfigError
from sagespec.common.policies import make_policy
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.multimodal import build_image_prompt, placeholder_spans
from sagespec.plugins.transformers.runtime import SpeculativeGenerator, TextOnlyDraftWarning

IMAGE_ROWS = 16
PROMPT = [1, 5, 7] + [TINY_IMAGE_TOKEN] * IMAGE_ROWS + [9, 5, 7, 9, 5, 7, 11, 3]
SPAN = (3, 3 + IMAGE_ROWS)
N = 40
VARIANTS = {
    "vispec": VisionConfig(compress="adaptor", global_fusion=True),
    "dream": VisionConfig(compress="prune", keep_ratio=0.5, prune_by="attention", cross_attention=True),
    "prune": VisionConfig(compress="prune", keep_ratio=0.25, prune_by="embedding"),
    "full+cross": VisionConfig(compress="none", cross_attention=True),
}


@pytest.fixture(scope="module")
def model():
    return tiny_llava(seed=0)


@pytest.fixture(scope="module")
def pixels():
    return torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def oracle(model, pixels):
    ref = copy.deepcopy(model)  # stock attention, stock image merge, stock generate
    ref.set_attn_implementation("sdpa")
    out = ref.generate(
        input_ids=torch.tensor([PROMPT]), pixel_values=pixels, max_new_tokens=N, min_new_tokens=N, do_sample=False
    )
    return out[0, len(PROMPT) :].tolist()


@pytest.fixture(scope="module")
def image_prompt(model, pixels):
    return build_image_prompt(model, PROMPT, pixels)


def head_for(model, seed=1):
    text = model.config.get_text_config()
    return EagleHead.random(
        EagleHeadConfig.for_target(text),
        model.get_input_embeddings().weight,
        model.get_output_embeddings().weight,
        seed=seed,
    )


def vision_drafter(model, config, seed=1):
    torch.manual_seed(seed)
    modules = VisionModules(config, model.config.get_text_config().hidden_size)
    if modules.cross is not None:  # a non-zero gate, so the injection really changes the drafts
        modules.cross.gate.data.fill_(0.5)
    return VisionDrafter(head_for(model, seed), config, modules)


def generator(model, drafter, policy="sage", **kw):
    layers = drafter.needs.hidden_layer_ids if drafter is not None else ()
    return SpeculativeGenerator(HFTreeLM(model, hidden_layer_ids=layers), drafter, make_policy(policy), **kw)


def test_image_prompt_spans_and_rows(image_prompt, model):
    assert image_prompt.images.spans == (SPAN,)
    assert image_prompt.images.embeds.shape == (IMAGE_ROWS, model.config.get_text_config().hidden_size)
    assert torch.equal(image_prompt.embeds[SPAN[0] : SPAN[1]], image_prompt.images.embeds)
    assert placeholder_spans(torch.tensor([5, 9, 9, 5, 9]), 9) == ((1, 3), (4, 5))


def test_plain_decoding_matches(model, oracle, image_prompt):
    assert generator(model, None).generate(None, N, image_prompt=image_prompt).tokens == oracle


@pytest.mark.parametrize("policy", ["sage", "dynamic"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_identity(model, oracle, image_prompt, variant, policy):
    drafter = vision_drafter(model, VARIANTS[variant])
    res = generator(model, drafter, policy).generate(None, N, image_prompt=image_prompt)
    assert res.tokens == oracle
    assert max(res.nodes_per_step) > 1


def test_text_only_drafter_falls_back_with_a_warning(model, oracle, image_prompt):
    gen = generator(model, EagleDrafter(head_for(model)))
    with pytest.warns(TextOnlyDraftWarning, match="cannot see images"):
        assert gen.generate(None, N, image_prompt=image_prompt).tokens == oracle


def test_strict_mode_refuses_a_text_only_drafter(model, image_prompt):
    gen = generator(model, EagleDrafter(head_for(model)), strict_multimodal=True)
    with pytest.raises(ConfigError, match=r"cannot see images.*strict"):
        gen.generate(None, N, image_prompt=image_prompt)


def test_vision_drafter_on_a_text_request(model):
    text_prompt = [1, 5, 7, 9, 5, 7, 11, 3]
    ref = copy.deepcopy(model)
    ref.set_attn_implementation("sdpa")
    expected = ref.generate(
        input_ids=torch.tensor([text_prompt]), max_new_tokens=24, min_new_tokens=24, do_sample=False
    )[0, len(text_prompt) :].tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = generator(model, vision_drafter(model, VARIANTS["vispec"])).generate(text_prompt, 24)
    assert res.tokens == expected


@pytest.mark.parametrize(
    "config, kept",
    [
        (VisionConfig(compress="none"), IMAGE_ROWS),
        (VisionConfig(compress="prune", keep_ratio=0.25), 4),
        (VisionConfig(compress="prune", keep_ratio=0.3), 5),
        (VisionConfig(compress="adaptor"), 1),
    ],
)
def test_compressed_cache_is_shorter_and_keeps_positions(model, image_prompt, config, kept):
    drafter = vision_drafter(model, config)
    res = generator(model, drafter, "chain").generate(None, 8, image_prompt=image_prompt)
    committed_pairs = len(PROMPT) + len(res.tokens) - 1  # the last token is the next root
    assert drafter.dropped == IMAGE_ROWS - kept
    # the cache after the last step ends before its root; the draft KV is that much shorter
    assert drafter.head.cache_length == drafter.cache_positions.numel()
    assert drafter.head.cache_length + drafter.dropped <= committed_pairs
    positions = drafter.cache_positions.tolist()
    image_positions = [p for p in positions if SPAN[0] <= p < SPAN[1]]
    assert len(image_positions) == kept
    text_positions = [p for p in positions if not SPAN[0] <= p < SPAN[1]]
    before = list(range(1, SPAN[0]))  # pair t sits at position t + 1
    assert text_positions == before + list(range(SPAN[1], SPAN[1] + len(text_positions) - len(before)))


def test_text_after_the_image_has_the_same_keys_under_every_compression(model, image_prompt):
    """A cache entry's key depends on its own input and RoPE position only: equal keys for the text
    after the image mean compression moved no text position."""
    keys = {}
    for name, config in [
        ("none", VisionConfig(compress="none")),
        ("prune", VARIANTS["prune"]),
        ("adaptor", VisionConfig(compress="adaptor", global_fusion=True)),
    ]:
        drafter = vision_drafter(model, config)
        generator(model, drafter, "chain").generate(None, 4, image_prompt=image_prompt)
        after = drafter.cache_positions >= SPAN[1]
        keys[name] = drafter.head.k_cache[after]
    assert keys["none"].shape[0] > 0
    torch.testing.assert_close(keys["prune"], keys["none"], rtol=0, atol=1e-6)
    torch.testing.assert_close(keys["adaptor"], keys["none"], rtol=0, atol=1e-6)


def test_attention_saliency_is_the_targets_attention(model, image_prompt):
    """The runtime's saliency equals transformers' eager attention of the prompt's last position."""
    drafter = vision_drafter(model, VARIANTS["dream"])
    seen = {}
    propose = drafter.propose

    def recording_propose(ctx, *args):
        seen.setdefault("images", ctx.images)
        return propose(ctx, *args)

    drafter.propose = recording_propose
    generator(model, drafter).generate(None, 2, image_prompt=image_prompt)
    ref = copy.deepcopy(model)
    ref.set_attn_implementation("eager")
    layer = model.config.get_text_config().num_hidden_layers // 2
    out = ref(inputs_embeds=image_prompt.embeds[None], output_attentions=True)
    expected = out.attentions[layer][0, :, -1].mean(0)[SPAN[0] : SPAN[1]]
    torch.testing.assert_close(seen["images"].saliency, expected, rtol=1e-5, atol=1e-6)


def test_bad_vision_options_are_refused():
    with pytest.raises(ConfigError, match="compress='squash'"):
        VisionConfig(compress="squash")
    with pytest.raises(ConfigError, match="keep_ratio=0"):
        VisionConfig(keep_ratio=0)
    with pytest.raises(ConfigError, match="global_fusion=True needs compress='adaptor'"):
        VisionConfig(compress="prune", global_fusion=True)
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['keep'\]"):
        VisionConfig.from_dict({"keep": 0.5})


def test_attention_pruning_needs_the_engines_saliency(model, image_prompt):
    drafter = vision_drafter(model, VARIANTS["dream"])
    images = ImageInputs(image_prompt.images.spans, image_prompt.images.embeds)  # no saliency
    from sagespec.common.drafters import DraftContext
    from sagespec.common.policies import TreeShape
    from sagespec.common.random_source import TorchRandom
    from sagespec.common.sampling import SamplingParams

    ctx = DraftContext(
        torch.tensor(PROMPT + [3]), torch.zeros(len(PROMPT), drafter.head.config.target_hidden_size), images
    )
    with pytest.raises(ConfigError, match="prune_by='attention' needs"):
        drafter.propose(ctx, TreeShape(depth=2, width=1, budget=2), SamplingParams(), TorchRandom(0))


def test_image_inputs_are_checked():
    with pytest.raises(ValueError, match="cover 4 positions but 3"):
        ImageInputs(((1, 5),), torch.zeros(3, 8))
    with pytest.raises(ValueError, match="ordered and disjoint"):
        ImageInputs(((4, 6), (5, 7)), torch.zeros(4, 8))


def test_vision_modules_round_trip(tmp_path, model):
    config = VARIANTS["vispec"]
    hidden = model.config.get_text_config().hidden_size
    torch.manual_seed(3)
    mods = VisionModules(config, hidden)
    mods.save(tmp_path)
    loaded = VisionModules.load_or_init(tmp_path, config, hidden, seed=9)
    for (name, a), (_, b) in zip(mods.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    with pytest.raises(ConfigError, match="was trained with"):
        VisionModules.load_or_init(tmp_path, VARIANTS["prune"], hidden)


def test_an_image_at_the_prompts_start(model, pixels):
    """Position 0 has no feature before it: its row cannot enter the draft; nothing else moves."""
    prompt = [TINY_IMAGE_TOKEN] * IMAGE_ROWS + [9, 5, 7, 9, 5, 7, 11, 3]
    ref = copy.deepcopy(model)
    ref.set_attn_implementation("sdpa")
    expected = ref.generate(
        input_ids=torch.tensor([prompt]), pixel_values=pixels, max_new_tokens=16, min_new_tokens=16, do_sample=False
    )[0, len(prompt) :].tolist()
    image_prompt = build_image_prompt(model, prompt, pixels)
    # compress none keeps rows 1..15; the adaptor's one token sits at the span's last position
    for config, kept, first in [
        (VisionConfig(compress="none"), IMAGE_ROWS - 1, 1),
        (VARIANTS["vispec"], 1, IMAGE_ROWS - 1),
    ]:
        drafter = vision_drafter(model, config)
        assert generator(model, drafter).generate(None, 16, image_prompt=image_prompt).tokens == expected
        assert drafter.dropped == IMAGE_ROWS - 1 - kept  # rows at positions 1..15 are pairs
        assert drafter.cache_positions[0] == first and bool((drafter.cache_positions.diff() > 0).all())


def test_the_runtime_leaves_the_vision_towers_attention_alone(pixels):
    """Tree attention goes to the text decoder only: the vision tower's attention is bidirectional,
    so image rows are the same before and after the model runs in the runtime."""
    from sagespec.plugins._hf_tree_lm import ATTENTION_NAME

    model = tiny_llava(seed=0)
    before = build_image_prompt(model, PROMPT, pixels).embeds
    generator(model, None).generate(None, 2, image_prompt=build_image_prompt(model, PROMPT, pixels))
    assert model.get_decoder().config._attn_implementation == ATTENTION_NAME
    assert model.config.vision_config._attn_implementation != ATTENTION_NAME
    torch.testing.assert_close(build_image_prompt(model, PROMPT, pixels).embeds, before, rtol=0, atol=0)


def test_a_text_model_runs_on_tree_attention():
    from tiny_models import tiny_llama

    from sagespec.plugins._hf_tree_lm import ATTENTION_NAME

    model = tiny_llama(seed=0)
    HFTreeLM(model)
    assert model.config._attn_implementation == ATTENTION_NAME
