"""Training data for vision drafters: drawn images + questions, the target's own answers (ViSpec),
and what the target computes over each whole sequence, cached to disk.

Per example: tokens (prompt with image placeholders + answer), the target's features at the head's
layers and final normed hidden state per position, the image spans and rows, the image rows'
saliency (attention of the prompt's last position at the middle layer, as the runtime computes
it) and, for DREAM's supervision, per position the hidden state of the target layer with the
lowest attention entropy (mean over heads) among its first 40% of layers.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from tqdm import tqdm

from sagespec.common.drafters import ImageInputs
from sagespec.common.training.vision_trainer import VisionExample
from sagespec.plugins.transformers.data.vision_prompts import vision_requests
from sagespec.plugins.transformers.runtime import TextOnlyDraftWarning

ENTROPY_LAYER_SHARE = 0.4


def lowest_entropy_layer_states(attentions, hidden_states, share: float = ENTROPY_LAYER_SHARE) -> torch.Tensor:
    """Per position, the output hidden state [T, H] of the layer (among the first `share` of layers)
    whose attention row has the lowest entropy, averaged over heads."""
    n = max(1, int(len(attentions) * share))
    ent = []
    for a in attentions[:n]:  # [1, heads, T, T]
        p = a[0].float().clamp_min(1e-30)
        ent.append(-(p * p.log()).sum(-1).mean(0))  # [T]
    choice = torch.stack(ent).argmin(0)  # [T] layer index
    outs = torch.stack([hidden_states[i + 1][0] for i in range(n)])  # layer i's output
    return outs[choice, torch.arange(choice.numel())]


@torch.no_grad()
def vision_examples(
    target,
    generator,
    n: int,
    answer_tokens: int,
    layer_ids,
    entropy_supervision: bool,
    seed: int = 0,
    store_dtype=torch.bfloat16,
) -> list[VisionExample]:
    """`generator` (a SpeculativeGenerator on the target) writes the target's greedy answers."""
    model = target.model
    text_config = model.config.get_text_config()
    middle = text_config.num_hidden_layers // 2
    decoder = model.get_decoder()
    attn_impl = decoder.config._attn_implementation
    out = []
    for image, question in tqdm(vision_requests(n, seed), desc="target answers + features", unit="image"):
        prompt = target.encode_image_chat(question, [image])
        with warnings.catch_warnings():  # a text head may draft the answers: their tokens are the target's
            warnings.simplefilter("ignore", TextOnlyDraftWarning)
            answer = generator.generate(None, answer_tokens, image_prompt=prompt).tokens
        tokens = torch.tensor(prompt.input_ids + answer)
        embeds = torch.cat([prompt.embeds, model.get_input_embeddings()(tokens[len(prompt.input_ids) :])])
        decoder.set_attn_implementation("eager")  # attention probabilities for saliency and entropies
        try:
            res = decoder(inputs_embeds=embeds[None], output_hidden_states=True, output_attentions=True)
        finally:
            decoder.set_attn_implementation(attn_impl)
        hs = res.hidden_states
        images = prompt.images
        saliency = res.attentions[middle][0, :, len(prompt.input_ids) - 1].mean(0)[images.positions]
        supervise = lowest_entropy_layer_states(res.attentions, hs) if entropy_supervision else None
        out.append(
            VisionExample(
                tokens=tokens,
                layer_feats=torch.cat([hs[i][0] for i in layer_ids], -1).to(store_dtype),
                final_hidden=res.last_hidden_state[0].to(store_dtype),
                images=ImageInputs(images.spans, images.embeds.to(store_dtype), saliency.float()),
                prompt_len=len(prompt.input_ids),
                supervise=None if supervise is None else supervise.to(store_dtype),
            )
        )
    return out


def cached_examples(path: Path, build) -> list[VisionExample]:
    if path.is_file():
        return [VisionExample.from_dict(d) for d in torch.load(path)]
    data = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save([d.to_dict() for d in data], path)
    return data
