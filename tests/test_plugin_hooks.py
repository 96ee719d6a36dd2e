"""Patch bookkeeping and contract checks shared by the engine plugins (no engine needed)."""

import sys
import types

import pytest

from sagespec.plugins._hooks import MARK, Hook, Patches, check_contract


@pytest.fixture
def fake_engine(monkeypatch):
    mod = types.ModuleType("fake_engine_mod")

    class Runner:
        def step(self, batch, metadata):
            return ("step", batch)

        def sample(self, logits):
            return ("sample", logits)

    mod.Runner = Runner
    monkeypatch.setitem(sys.modules, "fake_engine_mod", mod)
    return mod


def _tag(tag):
    def make(original):
        def wrapper(self, *args):
            return (tag, original(self, *args))

        return wrapper

    return make


def test_contract_lists_every_difference(fake_engine):
    hooks = [
        Hook("fake_engine_mod:Runner", kind="class"),
        Hook("fake_engine_mod:Runner.step", params=("batch", "metadata")),
        Hook("fake_engine_mod:Runner.step", params=("batch", "positions")),
        Hook("fake_engine_mod:Runner.gone"),
        Hook("fake_engine_mod:Runner.sample", kind="class"),
        Hook("no_such_engine_module:thing"),
    ]
    diffs = check_contract(hooks)
    assert len(diffs) == 4
    assert "expected to start with ['batch', 'positions']" in diffs[0]
    assert "Runner.gone: missing" in diffs[1]
    assert "expected a class" in diffs[2]
    assert "no_such_engine_module" in diffs[3]
    assert check_contract(hooks[:2]) == []


def test_patches_install_once_and_undo(fake_engine):
    p = Patches()
    p.add("fake_engine_mod:Runner", "step", _tag("ours"))
    p.add("fake_engine_mod:Runner", "sample", _tag("ours"))
    assert p.apply() is True
    r = fake_engine.Runner()
    assert r.step(1, 2) == ("ours", ("step", 1))
    assert p.apply() is False  # idempotent: a second registration changes nothing
    assert r.step(1, 2) == ("ours", ("step", 1))
    # The contract still checks the engine's own signature beneath our wrapper.
    assert check_contract([Hook("fake_engine_mod:Runner.step", params=("batch", "metadata"))]) == []
    p.undo()
    assert r.step(1, 2) == ("step", 1) and not hasattr(fake_engine.Runner.step, MARK)


def test_patches_are_all_or_nothing(fake_engine):
    p = Patches()
    p.add("fake_engine_mod:Runner", "step", _tag("ours"))
    p.add("fake_engine_mod:Runner", "missing_attribute", _tag("ours"))
    with pytest.raises(AttributeError):
        p.apply()
    assert fake_engine.Runner().step(1, 2) == ("step", 1)  # the first one was not installed either
