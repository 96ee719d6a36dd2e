"""Goodness of fit for sampling tests (shared by the unit tests and the engine lanes)."""

import math

import torch


def chi_square_pvalue(counts, probs, min_expected=5.0):
    n = counts.sum()
    expected = probs * n
    big = expected >= min_expected
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    k = int(keep.sum()) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))  # Wilson-Hilferty
    return 0.5 * math.erfc(z / math.sqrt(2))


def exact_joint(folder, prompt, temperature):
    """p(t1, t2, t3 | prompt) at the given temperature, [V, V, V] in fp64, for a model with a
    vocabulary of V tokens (transformers, fp32 weights)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    V = model.config.vocab_size
    t1, t2 = torch.meshgrid(torch.arange(V), torch.arange(V), indexing="ij")
    seqs = torch.cat([torch.tensor(prompt).expand(V * V, -1), t1.reshape(-1, 1), t2.reshape(-1, 1)], 1)
    with torch.no_grad():
        logits = model(seqs).logits.double() / temperature
    p1 = torch.softmax(logits[0, -3], -1)
    p2 = torch.softmax(logits[:, -2], -1).view(V, V, V)[:, 0]  # p(t2 | t1)
    p3 = torch.softmax(logits[:, -1], -1).view(V, V, V)  # p(t3 | t1, t2)
    return p1[:, None, None] * p2[:, :, None] * p3


def greedy_continuation(folder, prompt, n):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()
