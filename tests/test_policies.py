import pytest

from sagespec.common.params import ConfigError
from sagespec.common.policies import (
    ChainPolicy,
    DecodeState,
    DynamicPolicy,
    SagePolicy,
    StaticPolicy,
    StepStats,
    calibrate_thresholds,
    make_policy,
)


def observe(policy, h):
    policy.observe(StepStats(shape=None, num_nodes=0, accepted=0, target_entropy=h))


@pytest.mark.parametrize("mode", ["tiers", "continuous"])
def test_sage_shape_follows_entropy(mode):
    shapes = []
    for h in [0.0, 0.3, 0.8, 1.2, 2.0, 4.0]:
        p = SagePolicy(budget=16, mode=mode, ema=1.0)
        observe(p, h)
        shapes.append(p.plan(DecodeState()))
    depths = [s.depth for s in shapes]
    widths = [s.width for s in shapes]
    assert depths == sorted(depths, reverse=True) and depths[0] > depths[-1]  # confident: deep
    assert widths == sorted(widths) and widths[0] < widths[-1]  # uncertain: wide
    assert all(s.budget == 16 for s in shapes)


def test_sage_ema_smooths():
    p = SagePolicy(ema=0.25, thresholds=(0.5, 1.5))
    observe(p, 0.0)
    observe(p, 4.0)
    assert p.smoothed == pytest.approx(1.0)


def test_calibrated_thresholds_split_quantiles():
    ent = [i / 10 for i in range(100)]
    lo, hi = calibrate_thresholds(ent)
    assert lo == pytest.approx(3.3, abs=0.01) and hi == pytest.approx(6.6, abs=0.01)
    p = SagePolicy(thresholds=(lo, hi), ema=1.0)
    tiers = set()
    for h in ent:
        observe(p, h)
        tiers.add(p.plan(DecodeState()).depth)
    assert len(tiers) == 3


def test_static_and_chain_and_dynamic():
    assert ChainPolicy(depth=4).plan(DecodeState()).budget == 4
    s = StaticPolicy().plan(DecodeState())
    assert s.budget == len(s.paths) == 16 and s.depth == 5
    assert StaticPolicy(budget=5).plan(DecodeState()).budget == 5
    d = DynamicPolicy(depth=3, width=2, budget=6).plan(DecodeState())
    assert (d.depth, d.width, d.budget, d.paths) == (3, 2, 6, None)


@pytest.mark.parametrize(
    "name,kw,match",
    [
        ("sage", {"budget": 0}, "budget=0"),
        ("sage", {"ema": 0.0}, "ema=0.0"),
        ("sage", {"max_depth": 1, "min_depth": 3}, "max_depth=1"),
        ("sage", {"mode": "fancy"}, "mode='fancy'"),
        ("sage", {"thresholds": (2.0, 1.0)}, "ascending"),
        ("sage", {"bogus": 1}, "bogus"),
        ("chain", {"depth": 0}, "depth=0"),
        ("dynamic", {"width": 100}, "width=100"),
        ("static", {"paths": [(0,), (1, 0)]}, "no parent path"),
        ("nope", {}, "unknown"),
    ],
)
def test_bad_parameters_name_the_key(name, kw, match):
    with pytest.raises(ConfigError, match=match):
        make_policy(name, **kw)
