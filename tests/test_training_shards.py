"""Training on engine-made answers: the training prompts stay apart from the benchmark sets, packed
feature shards round-trip, length buckets cover every sequence once, offline chain tau equals a
real greedy chain decoding run, and the trainer's schedule, start state and checkpoint evals."""

import copy
import json
import math

import torch
from test_drafter_training import LAYERS, make_head, self_distillation_set
from tiny_models import tiny_llama

from sagespec.common.datasets import load_user_turns
from sagespec.common.drafters import EagleDrafter
from sagespec.common.policies import ChainPolicy
from sagespec.common.training.corpus import HELD_OUT_SHAREGPT, _normalise, training_prompts
from sagespec.common.training.draft_vocab import answer_token_counts, coverage, most_frequent, resize_draft_vocab
from sagespec.common.training.eagle_trainer import FeatureSet, TrainConfig, TrainState, train_eagle_head
from sagespec.common.training.feature_shards import PackedFeatures, ShardSet, length_buckets
from sagespec.common.training.offline_acceptance import offline_chain_tau
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator


def test_training_prompts_are_disjoint_from_benchmark_prompts():
    prompts = training_prompts()
    assert len(prompts) > 20_000 and len({p.id for p in prompts}) == len(prompts)
    bench = {_normalise(t) for name in ("mt-bench", "humaneval") for turns in load_user_turns(name) for t in turns}
    assert not bench & {_normalise(p.text) for p in prompts}
    held_ids = set(_sharegpt_ids(HELD_OUT_SHAREGPT))
    assert not held_ids & {p.id.split("/")[1] for p in prompts}
    code = [i for i, p in enumerate(prompts) if p.code]
    assert code and max(code) < 0.4 * len(prompts)  # every code turn early (three times its share)
    assert training_prompts(50) == prompts[:50]  # a prefix is the same whatever the limit


def _sharegpt_ids(n):
    from sagespec.common.datasets import dataset_file, iter_sharegpt

    return [c["id"] for c in iter_sharegpt(dataset_file("sharegpt"), n)]


def random_featureset(lengths, width=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, t = len(lengths), max(lengths)
    fs = FeatureSet(
        torch.randn(n, t, 3 * width, generator=g),
        torch.randn(n, t, width, generator=g),
        torch.randint(1, 50, (n, t), generator=g),
        torch.tensor(lengths),
    )
    for i, n_i in enumerate(lengths):  # zeros past each length, as extraction leaves them
        fs.layer_feats[i, n_i:] = 0
        fs.final_hidden[i, n_i:] = 0
        fs.tokens[i, n_i:] = 0
    return fs


def test_packed_features_round_trip(tmp_path):
    a, b = random_featureset([5, 9, 3]), random_featureset([7], seed=1)
    packed = PackedFeatures.pack([a, b], [1, 2, 1, 3])
    assert packed.num_positions == 24 and packed.lengths.tolist() == [5, 9, 3, 7]
    packed.save(tmp_path / "s.pt")
    loaded = PackedFeatures.load(tmp_path / "s.pt")
    back = loaded.padded(torch.tensor([0, 1, 2]))
    for name in ("layer_feats", "final_hidden", "tokens", "lengths"):
        torch.testing.assert_close(getattr(back, name), getattr(a, name), rtol=0, atol=0)
    torch.testing.assert_close(loaded.padded(torch.tensor([3])).tokens, b.tokens, rtol=0, atol=0)
    both = PackedFeatures.concat([PackedFeatures.pack([a], [1, 2, 1]), PackedFeatures.pack([b], [3])])
    for name in ("layer_feats", "final_hidden", "tokens", "offsets", "answer_starts"):
        torch.testing.assert_close(getattr(both, name), getattr(packed, name), rtol=0, atol=0)


def test_length_buckets_cover_each_sequence_once_within_the_token_budget():
    lengths = torch.randint(1, 60, (200,), generator=torch.Generator().manual_seed(0))
    batches = length_buckets(lengths, 256, torch.Generator().manual_seed(1))
    assert sorted(torch.cat(batches).tolist()) == list(range(200))
    for b in batches:
        assert len(b) == 1 or int(lengths[b].max()) * len(b) <= 256


def trained_head(target, data, tmp_path):
    head = make_head(target, seed=3).float()
    cfg = TrainConfig(steps=3, lr=3e-3, batch_size=8, max_tokens=30_000)
    train_eagle_head(head, data, target.lm_head.weight.detach(), tmp_path, cfg, progress=False, log=lambda m: None)
    return head.eval()


def test_offline_chain_tau_equals_greedy_chain_decoding(tmp_path):
    """The offline walk over the target's greedy answers gives the emitted tokens and verifies a
    decoding run gives (depth-5 chains, 24 new tokens, a head that accepts some drafts)."""
    torch.manual_seed(0)
    target = tiny_llama(seed=0)
    data = self_distillation_set(target)
    head = trained_head(target, data, tmp_path)
    prompt_len, new = 6, 24
    gen = SpeculativeGenerator(
        HFTreeLM(copy.deepcopy(target), hidden_layer_ids=LAYERS), EagleDrafter(head), ChainPolicy(depth=5)
    )
    emitted = verifies = 0
    for i in range(8):
        prompt = [int(t) for t in data.tokens[i, :prompt_len]]
        r = gen.generate(prompt, new)
        emitted += sum(r.accepted_per_step[1:])
        verifies += len(r.accepted_per_step) - 1
    greedy = target.generate(data.tokens[:8, :prompt_len], max_new_tokens=new, min_new_tokens=new, do_sample=False)
    with torch.no_grad():
        out = target.model(input_ids=greedy, output_hidden_states=True)
    fs = FeatureSet(
        torch.cat([out.hidden_states[i] for i in LAYERS], -1),
        out.last_hidden_state,
        greedy,
        torch.full((8,), prompt_len + new),
    )
    packed = PackedFeatures.pack([fs], [prompt_len] * 8)
    offline = offline_chain_tau(head, packed, depth=5, max_new_tokens=new)
    assert verifies > 0 and emitted > verifies * 1.2  # the head does accept drafts
    assert (offline["emitted"], offline["verifies"]) == (emitted, verifies)
    assert math.isclose(offline["tau"], emitted / verifies)


def test_schedule_warmup_and_cosine():
    cfg = TrainConfig(lr=1e-3, warmup_steps=10, schedule="cosine", schedule_tokens=1000, min_lr_ratio=0.1)
    assert math.isclose(cfg.lr_at(0, 0), 1e-4)
    assert math.isclose(cfg.lr_at(9, 0), 1e-3)
    assert math.isclose(cfg.lr_at(50, 500), 1e-3 * (0.1 + 0.9 * 0.5))
    assert math.isclose(cfg.lr_at(99, 1000), 1e-4) and math.isclose(cfg.lr_at(99, 5000), 1e-4)
    assert TrainConfig(lr=2e-4).lr_at(0, 10**9) == 2e-4


def test_start_state_budget_counts_this_phase_and_checkpoints_evaluate(tmp_path):
    """Starting from a shipped head's recorded step: the token budget counts this phase only, and
    every checkpoint (here: the last) appends an evaluation with tokens, step and loss."""
    target = tiny_llama(seed=0)
    data = self_distillation_set(target, n=8)
    packed = PackedFeatures.pack([data], [4] * 8)
    packed.save(tmp_path / "features-shard-00000.pt")
    start = TrainState(step=100, tokens_seen=50_000, seconds=60.0)
    calls = []

    def evaluate(head):
        calls.append(head)
        return {"mt-bench": 1.0}

    cfg = TrainConfig(steps=2, max_tokens=600, batch_tokens=160)
    state = train_eagle_head(
        make_head(target).float(),
        ShardSet([tmp_path / "features-shard-00000.pt"]),
        target.lm_head.weight.detach(),
        tmp_path / "out",
        cfg,
        progress=False,
        log=lambda m: None,
        start_state=start,
        evaluate=evaluate,
    )
    assert 50_600 <= state.tokens_seen < 50_600 + 160 and state.step > 100
    assert state.phase_start_tokens == 50_000 and state.phase_start_step == 100
    assert state.phase_start_seconds == 60.0 and state.seconds > 60.0
    assert len(calls) == 1  # evaluated once, at the end (checkpoints every 5 minutes)
    assert state.evals[-1]["mt-bench"] == 1.0 and state.evals[-1]["tokens_seen"] == state.tokens_seen


def test_start_state_minutes_budget_counts_this_phase(tmp_path):
    """A shipped head recorded 54 training minutes; a 0.05-minute budget still trains."""
    target = tiny_llama(seed=0)
    packed = PackedFeatures.pack([self_distillation_set(target, n=8)], [4] * 8)
    packed.save(tmp_path / "f.pt")
    start = TrainState(step=10, tokens_seen=5_000, seconds=54 * 60.0)
    state = train_eagle_head(
        make_head(target).float(),
        ShardSet([tmp_path / "f.pt"]),
        target.lm_head.weight.detach(),
        tmp_path / "out",
        TrainConfig(steps=2, max_minutes=0.05, batch_tokens=160),
        progress=False,
        log=lambda m: None,
        start_state=start,
    )
    assert state.step > 10 and 54 * 60.0 + 2 < state.seconds < 54 * 60.0 + 30


def test_bf16_compute_trains_with_fp32_weights_and_tracks_fp32_loss(tmp_path):
    """compute_dtype="bfloat16" runs the head's matmuls under autocast: weights and optimizer stay
    fp32, and the training loss falls as the fp32 run's does (within bf16 rounding)."""
    target = tiny_llama(seed=0)
    packed = PackedFeatures.pack([self_distillation_set(target, n=8)], [4] * 8)
    packed.save(tmp_path / "f.pt")
    runs = {}
    for dtype in ("float32", "bfloat16"):
        torch.manual_seed(0)
        head = make_head(target).float()
        state = train_eagle_head(
            head,
            ShardSet([tmp_path / "f.pt"]),
            target.lm_head.weight.detach(),
            tmp_path / dtype,
            TrainConfig(steps=2, lr=3e-3, max_tokens=3000, batch_tokens=160, compute_dtype=dtype),
            progress=False,
            log=lambda m: None,
        )
        assert all(p.dtype == torch.float32 for p in head.parameters())
        losses = [loss for _, loss, _ in state.history]
        runs[dtype] = (sum(losses[:3]) / 3, sum(losses[-3:]) / 3)
    for first, last in runs.values():
        assert last < 0.9 * first
    assert math.isclose(runs["bfloat16"][1], runs["float32"][1], rel_tol=0.1)


def test_resize_draft_vocab_keeps_trained_rows_and_starts_new_ones_at_the_target(tmp_path):
    target = tiny_llama(seed=0)
    head = make_head(target, vocab=40).float()
    with torch.no_grad():
        head.d2t.copy_(torch.arange(0, 80, 2))  # drafts the even ids 0..78
    counts = torch.zeros(96, dtype=torch.long)
    counts[torch.arange(0, 96, 3)] = torch.arange(32, 0, -1)  # ids 0, 3, ..., 93; lower ids more frequent
    d2t = most_frequent(counts, 20)
    assert d2t.tolist() == list(range(0, 60, 3))
    assert math.isclose(coverage(counts, d2t), sum(range(13, 33)) / sum(range(1, 33)))
    assert math.isclose(
        coverage(counts, head.d2t),
        sum(32 - i for i in range(0, 32) if 3 * i % 2 == 0 and 3 * i < 80) / sum(range(1, 33)),
    )
    new = resize_draft_vocab(head, d2t)
    assert new.config.draft_vocab_size == 20 and new.d2t.tolist() == d2t.tolist()
    old_row = {t: r for r, t in enumerate(head.d2t.tolist())}
    for r, t in enumerate(d2t.tolist()):
        want = head.lm_head.weight[old_row[t]] if t in old_row else target.lm_head.weight[t].float()
        assert torch.equal(new.lm_head.weight[r], want)
    hidden = torch.randn(3, head.config.hidden_size)
    kept = [r for r, t in enumerate(d2t.tolist()) if t in old_row]
    assert torch.allclose(
        new.draft_logits(hidden)[:, kept], head.draft_logits(hidden)[:, [old_row[d2t[r].item()] for r in kept]]
    )
    for name, p in head.state_dict().items():
        if name not in ("lm_head.weight", "d2t"):
            assert torch.equal(new.state_dict()[name], p)
    new.save(tmp_path / "resized")  # loads back with its new size
    back = type(head).load(
        tmp_path / "resized", target.model.embed_tokens.weight, target.lm_head.weight, target.config.num_hidden_layers
    )
    assert back.config.draft_vocab_size == 20


def test_answer_token_counts_reads_each_shards_answers(tmp_path):
    rows = [{"id": "a", "prompt": [1, 1], "answer": [2, 3, 3]}, {"id": "b", "prompt": [5], "answer": [3, 7]}]
    (tmp_path / "shard-00000.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    counts = answer_token_counts(tmp_path, 10)
    assert counts.tolist() == [0, 0, 1, 3, 0, 0, 0, 1, 0, 0]
