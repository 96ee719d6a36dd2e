"""The smollm2-llava stand-in (SmolLM2 + random CLIP tower, built offline) in the reference runtime,
fp32: image prompts through its processor; greedy identity of every vision-aware drafter with SAGE
trees against transformers' own image+text generate; the CLI's --image path."""

import copy
import json

import pytest

from sagespec.plugins.transformers.cli.main import main
from sagespec.plugins.transformers.data.vision_prompts import vision_requests
from sagespec.plugins.transformers.factory import load_target, make_drafter, make_generator, make_policy_from_args
from sagespec.plugins.transformers.vlm_stand_in import IMAGE_TOKEN

NEW_TOKENS = 32


@pytest.fixture(scope="module")
def stand_in():
    return load_target("smollm2-llava", "float32")


@pytest.fixture(scope="module")
def requests(stand_in):
    return [stand_in.encode_image_chat(question, [image]) for image, question in vision_requests(2)]


@pytest.fixture(scope="module")
def oracle(stand_in, requests):
    """transformers' own path: the processor's pixel values, its image merge, sdpa, generate."""
    from transformers import AutoProcessor

    from sagespec.plugins.transformers.model_loading import resolve_model_path

    ref = copy.deepcopy(stand_in.model)
    ref.set_attn_implementation("sdpa")
    processor = AutoProcessor.from_pretrained(resolve_model_path("smollm2-llava"))
    outs = []
    for image, question in vision_requests(2):
        content = [{"type": "image"}, {"type": "text", "text": question}]
        prompt = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = processor(images=[image], text=prompt, return_tensors="pt")
        out = ref.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
        outs.append(out[0, inputs["input_ids"].shape[1] :].tolist())
    return outs


def test_image_prompt_layout(stand_in, requests):
    tok = stand_in.tokenizer
    assert tok.convert_tokens_to_ids(IMAGE_TOKEN) == stand_in.model.config.image_token_index
    assert len(tok) == stand_in.model.config.get_text_config().vocab_size  # the text model's vocabulary
    for req in requests:
        ((start, end),) = req.images.spans
        assert end - start == 64
        assert req.input_ids[start:end] == [stand_in.model.config.image_token_index] * 64


@pytest.mark.parametrize("drafter", ["vispec", "dream", "vision-prune"])
def test_greedy_identity(stand_in, requests, oracle, drafter):
    gen = make_generator(stand_in, make_drafter(drafter, stand_in, dtype="float32"), make_policy_from_args("sage", 8))
    results = [gen.generate(None, NEW_TOKENS, image_prompt=req) for req in requests]
    for res, expected in zip(results, oracle):
        assert res.tokens == expected[: len(res.tokens)] and len(res.tokens) == len(expected)
    assert sum(sum(r.accepted_per_step[1:]) - len(r.accepted_per_step[1:]) for r in results) > 0  # drafts accepted
    assert any(s.width > 1 for r in results for s in r.shapes)  # real trees


def test_cli_generates_from_an_image(tmp_path, capsys):
    image, _ = vision_requests(1)[0]
    path = tmp_path / "shapes.png"
    image.save(path)
    code = main(
        [
            "generate",
            "--model",
            "smollm2-llava",
            "--dtype",
            "float32",
            "--image",
            str(path),
            "--prompt",
            "Describe it.",
            "--drafter",
            "vision-prune",
            "--vision-options",
            '{"keep_ratio": 0.5}',
            "--max-new-tokens",
            "8",
            "--json",
            "--threads",
            "2",
        ]
    )
    assert code == 0
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 8


@pytest.mark.parametrize(
    "args, message",
    [
        (["--image", "missing.png"], "--image 'missing.png': no such file"),
        (
            ["--drafter", "ngram", "--vision-options", '{"keep_ratio": 0.5}'],
            "vision options are for the vision drafters",
        ),
        (["--drafter", "vispec", "--vision-options", '{"keep": 1}'], r"unknown option\(s\) \['keep'\]"),
    ],
)
def test_cli_refuses_bad_image_input(capsys, args, message):
    code = main(["generate", "--model", "smollm2-llava", "--prompt", "x", "--max-new-tokens", "2", *args])
    assert code == 2
    import re

    assert re.search(message, capsys.readouterr().err)


def test_text_model_refuses_images(tmp_path, capsys):
    image, _ = vision_requests(1)[0]
    image.save(tmp_path / "a.png")
    code = main(
        [
            "generate",
            "--model",
            "smollm2",
            "--image",
            str(tmp_path / "a.png"),
            "--prompt",
            "x",
            "--drafter",
            "ngram",
            "--max-new-tokens",
            "2",
        ]
    )
    assert code == 2
    assert "LlamaForCausalLM is not a vision-language model" in capsys.readouterr().err


def test_train_drafter_cli_trains_a_vision_drafter(tmp_path, capsys):
    code = main(
        [
            "train-drafter",
            "--model",
            "smollm2-llava",
            "--drafter",
            "dream",
            "--vision-options",
            '{"prune_by": "embedding"}',
            "--entropy-supervision",
            "--images",
            "2",
            "--answer-tokens",
            "12",
            "--max-tokens",
            "40",
            "--batch-size",
            "1",
            "--out",
            str(tmp_path / "head"),
            "--threads",
            "2",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["steps"] >= 2 and report["vision"]["cross_attention"] is True
    for name in ("config.json", "model.safetensors", "vision_config.json", "vision.safetensors"):
        assert (tmp_path / "head" / name).is_file()
    target = load_target("smollm2-llava", "float32")
    drafter = make_drafter(
        "dream", target, eagle_head=str(tmp_path / "head"), dtype="float32", vision_options={"prune_by": "embedding"}
    )
    assert drafter.modules.cross.gate.item() != 0.0  # the trained gate, not the zero start


def test_train_drafter_refuses_a_text_model_for_a_vision_drafter(tmp_path, capsys):
    code = main(
        [
            "train-drafter",
            "--model",
            "smollm2",
            "--drafter",
            "vispec",
            "--max-tokens",
            "8",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert code == 2
    assert "vision-language --model" in capsys.readouterr().err
