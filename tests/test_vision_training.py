"""Vision drafter training on a tiny random LLaVA: the training layout is the inference layout
(training-time test over the compressed entries equals what the drafter computes when drafting),
an example can be fitted, and the trained modules load back."""

import pytest
import torch
import torch.nn.functional as F
from test_vision_drafters import PROMPT, SPAN, VARIANTS, head_for, vision_drafter
from tiny_models import tiny_llava

from sagespec.common.drafters import VisionModules
from sagespec.common.drafters.tree_lm import causal_extension_mask
from sagespec.common.training.eagle_trainer import TrainConfig
from sagespec.common.training.eagle_ttt import ttt_forward
from sagespec.common.training.vision_trainer import VisionExample, example_loss, train_vision_drafter
from sagespec.plugins.transformers.multimodal import build_image_prompt

ANSWER = [5, 7, 9, 11, 3, 5, 7, 9, 11, 3, 5, 7]


@pytest.fixture(scope="module")
def model():
    return tiny_llava(seed=0)


@pytest.fixture(scope="module")
def example(model):
    pixels = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    prompt = build_image_prompt(model, PROMPT, pixels)
    tokens = torch.tensor(PROMPT + ANSWER)
    embeds = torch.cat([prompt.embeds, model.get_input_embeddings()(tokens[len(PROMPT) :])])
    with torch.no_grad():
        out = model.get_decoder()(inputs_embeds=embeds[None], output_hidden_states=True)
    layers = head_for(model).config.target_layer_ids
    feats = torch.cat([out.hidden_states[i][0] for i in layers], -1)
    saliency = torch.rand(SPAN[1] - SPAN[0], generator=torch.Generator().manual_seed(1))
    images = type(prompt.images)(prompt.images.spans, prompt.images.embeds, saliency)
    return VisionExample(
        tokens, feats, out.last_hidden_state[0], images, len(PROMPT), supervise=out.hidden_states[1][0]
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_training_layout_is_the_drafting_layout(model, example, variant):
    drafter = vision_drafter(model, VARIANTS[variant])
    length = example.tokens.numel()
    feats = example.layer_feats
    # inference: the whole sequence as a prompt, as `propose` lays it out
    drafter.begin()
    idx, embeds = drafter.prompt_entries(example.tokens, feats[: length - 1], example.images)
    positions = idx + 1
    fused = drafter.features(feats[idx])
    with torch.no_grad():
        hidden = drafter.refine(
            drafter.head.hidden_step(
                example.tokens[idx + 1], fused, positions, causal_extension_mask(0, idx.numel()), embeds=embeds
            )
        )
        # one draft step from the last entry: its output paired with the next token, at the next position
        nxt = drafter.head.hidden_step(
            torch.tensor([3]), hidden[-1:], positions[-1:] + 1, torch.ones(1, idx.numel() + 1, dtype=torch.bool)
        )
        nxt = drafter.refine(nxt)
        tokens = F.pad(example.tokens[idx + 1], (0, 2), value=3)
        outs = ttt_forward(
            drafter.head,
            fused[None],
            tokens[None],
            2,
            positions=positions[None],
            embeds=embeds[None],
            refine=drafter.refine,
        )
    torch.testing.assert_close(outs[0][0], hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[1][0, -1:], nxt, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["vispec", "dream"])
def test_an_example_can_be_fitted(model, example, variant):
    drafter = vision_drafter(model, VARIANTS[variant])
    w = model.get_output_embeddings().weight.detach().float()
    params = [p for m in (drafter.head, drafter.modules) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=3e-3)
    first = None
    for _ in range(25):
        loss, _ = example_loss(drafter, example, w, steps=2, decay=0.8, supervise_weight=0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = float(loss.detach()) if first is None else first
    assert float(loss.detach()) < 0.7 * first
    if variant == "vispec":  # the adaptor and the fusion were trained, not only the head
        assert drafter.modules.adaptor.queries.grad is not None
        g_columns = drafter.modules.fusion.fc.weight[:, 64:]  # start at 0 ([I | 0])
        assert g_columns.abs().sum() > 0


def test_trainer_saves_what_the_drafter_loads(tmp_path, model, example):
    drafter = vision_drafter(model, VARIANTS["vispec"])
    w = model.get_output_embeddings().weight.detach().float()
    state = train_vision_drafter(
        drafter,
        [example],
        w,
        tmp_path,
        TrainConfig(steps=2, batch_size=1, max_tokens=24),
        progress=False,
        log=lambda m: None,
    )
    assert state.step == 2 and (tmp_path / "config.json").is_file()
    loaded = VisionModules.load_or_init(tmp_path, VARIANTS["vispec"], 64)
    for (name, a), (_, b) in zip(drafter.modules.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    resumed = train_vision_drafter(
        vision_drafter(model, VARIANTS["vispec"]),
        [example],
        w,
        tmp_path,
        TrainConfig(steps=2, batch_size=1, max_tokens=36),
        progress=False,
        log=lambda m: None,
    )
    assert resumed.step == 3
