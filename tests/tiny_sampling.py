"""Building a reference runtime around a tiny target, and the Monte Carlo check of sampling
against the target's exact distribution (shared by the drafter tests)."""

import copy

import torch

from sagespec.common.sampling import SamplingParams
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.runtime import SpeculativeGenerator

V_SMALL = 12


def generator(target, drafter, policy, **kw):
    """A SpeculativeGenerator over `target`; drafters that draft with the target get it bound."""
    layers = drafter.needs.hidden_layer_ids if drafter is not None else ()
    lm = HFTreeLM(target, hidden_layer_ids=layers)
    if hasattr(drafter, "bind_target"):
        drafter.bind_target(lm)
    return SpeculativeGenerator(lm, drafter, policy, **kw)


def greedy_oracle(model, prompt, n: int) -> list[int]:
    """The model's own greedy continuation (stock attention, stock generate): what identity tests
    compare with."""
    ref = copy.deepcopy(model)
    ref.set_attn_implementation("sdpa")
    out = ref.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def exact_pair_distribution(model, prompt):
    """P(t2, t3) of the 2nd and 3rd generated tokens (the first verify steps), exactly."""
    with torch.no_grad():
        p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].double(), -1)
        seqs = torch.tensor([prompt + [a, b] for a in range(V_SMALL) for b in range(V_SMALL)])
        logits = model(seqs).logits.double()
    p2 = torch.softmax(logits[:, -2], -1).view(V_SMALL, V_SMALL, V_SMALL)[:, 0]  # p(t2 | t1)
    p3 = torch.softmax(logits[:, -1], -1).view(V_SMALL, V_SMALL, V_SMALL)  # p(t3 | t1, t2)
    joint = p1[:, None, None] * p2[:, :, None] * p3
    return joint.sum(0)


def sample_pairs(target, drafter, policy, rule, n, sizer=None):
    gen = generator(target, drafter, policy, acceptance=rule, sizer=sizer)
    counts = torch.zeros(V_SMALL, V_SMALL, dtype=torch.float64)
    for seed in range(n):
        t = gen.generate([1, 2, 3], 3, SamplingParams(1.0), seed=seed).tokens
        counts[t[1], t[2]] += 1
    return counts
