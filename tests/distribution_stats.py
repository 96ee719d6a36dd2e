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
