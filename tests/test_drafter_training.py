"""Drafter training: training-time test matches inference drafting, a tiny run lowers the loss and
round-trips through save/load, and a head trained on a tiny model's own outputs accepts more than
a random head."""

import copy

import pytest
import torch
from tiny_models import tiny_llama

from sagespec.common.drafters import EagleDrafter, EagleHead, EagleHeadConfig
from sagespec.common.drafters.tree_lm import causal_extension_mask
from sagespec.common.policies import ChainPolicy
from sagespec.common.training.eagle_trainer import STATE_NAME, FeatureSet, TrainConfig, train_eagle_head
from sagespec.common.training.eagle_ttt import ttt_forward
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

LAYERS = (0, 1, 2)


def make_head(target, seed=0, vocab=None):
    cfg = EagleHeadConfig.for_target(target.config, LAYERS, draft_vocab_size=vocab)
    return EagleHead.random(cfg, target.model.embed_tokens.weight, target.lm_head.weight, seed=seed)


def test_ttt_unroll_equals_inference_drafting():
    target = tiny_llama(seed=0)
    head = make_head(target, vocab=50)
    g = torch.Generator().manual_seed(1)
    t_len, steps = 7, 3
    feats = torch.randn(1, t_len, head.fc.in_features, generator=g)
    tokens = torch.randint(0, 96, (1, t_len + steps), generator=g)
    outs = ttt_forward(head, head.fuse(feats), tokens, steps)
    for t in range(t_len):  # root pair index t: committed pairs 0..t, then a chain of depth steps-1
        head.reset_cache()
        out, _ = head.step(
            tokens[0, : t + 1], head.fuse(feats[0, : t + 1]), torch.arange(1, t + 2), causal_extension_mask(0, t + 1)
        )
        torch.testing.assert_close(out[-1], outs[0][0, t], rtol=1e-5, atol=1e-5)
        h = out[-1]
        for j in range(1, steps):
            mask = torch.ones(1, head.cache_length + 1, dtype=torch.bool)
            h, _ = head.step(tokens[0, t + j : t + j + 1], h[None], torch.tensor([t + 1 + j]), mask)
            h = h[0]
            torch.testing.assert_close(h, outs[j][0, t], rtol=1e-5, atol=1e-5)


def self_distillation_set(target, n=24, length=40, seed=0):
    """Greedy continuations the tiny target writes from random starts, with its features at LAYERS
    (the text greedy decoding will see)."""
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for _ in range(n):
        start = torch.randint(1, 96, (1, 4), generator=gen)
        seqs.append(target.generate(start, max_new_tokens=length - 4, min_new_tokens=length - 4, do_sample=False)[0])
    tokens = torch.stack(seqs)
    with torch.no_grad():
        out = target.model(input_ids=tokens, output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i] for i in LAYERS], -1)
    return FeatureSet(feats, out.last_hidden_state, tokens, torch.full((n,), length))


def chain_tau(target, head, prompts):
    drafter = EagleDrafter(head.eval())
    gen = SpeculativeGenerator(HFTreeLM(copy.deepcopy(target), hidden_layer_ids=LAYERS), drafter, ChainPolicy(depth=4))
    res = [gen.generate(p, 24) for p in prompts]
    return sum(sum(r.accepted_per_step[1:]) for r in res) / sum(len(r.accepted_per_step) - 1 for r in res)


def test_tiny_training_learns_and_round_trips(tmp_path):
    torch.manual_seed(0)
    target = tiny_llama(seed=0)
    data = self_distillation_set(target)
    head = make_head(target, seed=3).float()
    w = target.lm_head.weight.detach()
    state = train_eagle_head(
        head,
        data,
        w,
        tmp_path,
        TrainConfig(steps=3, lr=3e-3, batch_size=8, max_tokens=40_000),
        progress=False,
        log=lambda m: None,
    )
    first = sum(h[1] for h in state.history[:5]) / 5
    last = sum(h[1] for h in state.history[-5:]) / 5
    assert last < 0.8 * first
    loaded = EagleHead.load(tmp_path, target.model.embed_tokens.weight, target.lm_head.weight, 2)
    feats = data.layer_feats[0, :10]
    for h in (head, loaded):
        h.reset_cache()
    a = head.step(data.tokens[0, 1:11], head.fuse(feats), torch.arange(1, 11), causal_extension_mask(0, 10))[1]
    b = loaded.step(data.tokens[0, 1:11], loaded.fuse(feats), torch.arange(1, 11), causal_extension_mask(0, 10))[1]
    torch.testing.assert_close(a, b, rtol=0, atol=0)

    # Prompts are starts of the training texts: greedy decoding then walks text the head was trained
    # on, so this checks that training and drafting agree end to end (features, unrolled steps,
    # positions), not generalisation, which random tiny models do not offer.
    prompts = [[int(t) for t in data.tokens[i, :6]] for i in range(6)]
    trained = chain_tau(target, loaded, prompts)
    random_head = chain_tau(target, make_head(target, seed=3), prompts)
    assert trained > random_head + 0.3


def test_resume_continues_from_the_checkpoint(tmp_path):
    target = tiny_llama(seed=0)
    data = self_distillation_set(target, n=8)
    w = target.lm_head.weight.detach()
    cfg = TrainConfig(steps=2, batch_size=4, max_tokens=1000)
    s1 = train_eagle_head(make_head(target).float(), data, w, tmp_path, cfg, progress=False, log=lambda m: None)
    cfg.max_tokens, cfg.lr = 2000, 1e-4
    logs = []
    s2 = train_eagle_head(make_head(target, seed=9).float(), data, w, tmp_path, cfg, progress=False, log=logs.append)
    assert logs and "resumed" in logs[0]
    assert s2.step > s1.step and s2.history[: len(s1.history)] == s1.history
    saved = torch.load(tmp_path / STATE_NAME, weights_only=False)  # a resumed run fine-tunes at the new rate
    assert [g["lr"] for g in saved["optimizer"]["param_groups"]] == [1e-4]


def test_vllm_eagle3_export_names_shapes_and_offsets(tmp_path):
    import json as _json

    from safetensors.torch import load_file

    from sagespec.common.training.export_vllm import export_vllm_eagle3

    target = tiny_llama(seed=0)
    head = make_head(target, vocab=40)
    head.d2t.copy_(torch.arange(40) * 2)  # draft id i -> target id 2i
    export_vllm_eagle3(head, tmp_path, 512, dtype=torch.float32)
    cfg = _json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 40
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(LAYERS)
    w = load_file(str(tmp_path / "model.safetensors"))
    h = target.config.hidden_size
    assert w["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * h
    assert w["fc.weight"].shape == (h, 3 * h) and w["lm_head.weight"].shape == (40, h)
    assert torch.equal(w["d2t"] + torch.arange(40), head.d2t)
    assert torch.equal(w["midlayer.hidden_norm.weight"], head.hidden_norm.detach())


def flat_params(module):
    return torch.cat([q.detach().flatten() for q in module.parameters()])


def adaspec_run(target, data, tmp_path, top):
    torch.manual_seed(0)
    head = make_head(target, seed=5).float()
    reference = make_head(target, seed=4).float() if top is not None else None
    cfg = TrainConfig(steps=2, batch_size=4, max_tokens=600, lr=3e-3, adaspec_top=top)
    w = target.lm_head.weight.detach()
    state = train_eagle_head(head, data, w, tmp_path, cfg, reference=reference, progress=False, log=lambda m: None)
    return head, state


def test_adaspec_trains_only_on_the_selected_fraction(tmp_path):
    import torch.nn.functional as F

    from sagespec.common.training.eagle_trainer import adaspec_weights, batch_tensors

    target = tiny_llama(seed=0)
    data = self_distillation_set(target, n=8)
    w = target.lm_head.weight.detach()
    reference = make_head(target, seed=4).float()
    head = make_head(target, seed=5).float()
    raw, tokens, logits, valid = batch_tensors(data, torch.arange(4), w, 2)
    weights = adaspec_weights(head, reference, raw, tokens, logits, valid, 0.25)
    t_len = raw.shape[1]
    real = valid[:, :t_len]
    assert int(weights.sum()) == -(-int(real.sum()) // 4)  # ties are measure-zero with random heads
    assert bool((weights[~valid] == 0).all())
    # The selected positions are those where the head trails the reference most, by the KL gap
    # KL(p || head) - KL(p || reference), computed here with torch's own KL.
    with torch.no_grad():
        p = F.softmax(logits[:, :t_len].float(), -1)
        kl = [
            F.kl_div(
                F.log_softmax(h.draft_logits(ttt_forward(h, h.fuse(raw), tokens, 1)[0]), -1), p, reduction="none"
            ).sum(-1)
            for h in (head, reference)
        ]
    gap, chosen = kl[0] - kl[1], weights[:, :t_len].bool()
    assert float(gap[chosen].min()) >= float(gap[real & ~chosen].max())

    # End to end: keeping every position is plain training, bit for bit; keeping a quarter is not.
    plain, _ = adaspec_run(target, data, tmp_path / "plain", None)
    everything, _ = adaspec_run(target, data, tmp_path / "all", 1.0)
    quarter, state = adaspec_run(target, data, tmp_path / "quarter", 0.25)
    assert torch.equal(flat_params(plain), flat_params(everything))
    assert not torch.allclose(flat_params(plain), flat_params(quarter))
    assert state.step >= 2


@pytest.mark.slow
def test_self_distillation_data_is_the_targets_own_greedy_answer(smollm2_fp32):
    from sagespec.plugins.transformers.data.drafter_data import self_distilled_ids

    model, tok = smollm2_fp32.model, smollm2_fp32.tokenizer
    seq_len = 96
    sequences = self_distilled_ids(model, tok, max_conversations=2, seq_len=seq_len, batch_size=2)
    assert len(sequences) == 2
    for seq in sequences:
        # The prompt ends where the chat template opens the assistant turn; the rest is the answer.
        opener = tok.apply_chat_template(
            [{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        opener = list(opener["input_ids"] if isinstance(opener, dict) else opener)[-3:]
        cut = max(i for i in range(len(seq) - 2) if seq[i : i + 3] == opener) + 3
        prompt, answer = seq[:cut], seq[cut:]
        assert answer, "no answer was generated"
        with torch.no_grad():
            alone = model.generate(
                torch.tensor([prompt]), do_sample=False, max_new_tokens=len(answer), pad_token_id=tok.pad_token_id
            )[0, len(prompt) :].tolist()
        assert answer == alone[: len(answer)]
