"""The static hook check reads a release's source the way Python would resolve the names: modules
by path, re-exports (named and `*`), relative imports, inherited methods, dataclass fields, and
names under version guards; a hook whose parameters changed, moved or vanished is reported."""

import textwrap

import pytest

from sagespec.plugins._hook_source import SourceTree, check_source
from sagespec.plugins._hooks import Hook

RELEASE = {
    "eng/__init__.py": "from eng.core import *\n",
    "eng/core.py": """
        import sys
        from dataclasses import dataclass

        def helper(a, b, *rest, key=None, **extra): ...

        @dataclass
        class Plan:
            device: str
            width: int = 1

        if sys.version_info >= (3, 10):
            def guarded(x): ...
        """,
    "eng/worker/__init__.py": "",
    "eng/worker/base.py": """
        class Base:
            def step(self, batch, metadata): ...
            def __init__(self, config, rank=0): ...
        """,
    "eng/worker/runner.py": """
        from .base import Base as _Base
        from ..core import helper as exported_helper

        class Runner(_Base):
            def _sample(self, logits, spec): ...

        alias = exported_helper
        """,
}


@pytest.fixture
def release(tmp_path):
    for name, text in RELEASE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return SourceTree.from_folder(tmp_path)


def test_hooks_the_source_satisfies(release):
    hooks = [
        Hook("eng:helper", params=("a", "b", "rest", "key", "extra")),  # inspect.signature's order
        Hook("eng.core:Plan", kind="class", params=("device", "width")),  # dataclass fields
        Hook("eng.core:guarded", params=("x",)),  # under a version guard
        Hook("eng.worker.runner:Runner", kind="class", params=("config", "rank")),  # inherited __init__
        Hook("eng.worker.runner:Runner.step", params=("batch", "metadata")),  # inherited method
        Hook("eng.worker.runner:Runner._sample", params=("logits",)),  # a prefix is enough
        Hook("eng.worker.runner:exported_helper", params=("a", "b")),  # relative re-export
        Hook("eng.worker.runner:alias"),  # bound by assignment, no parameters asked
    ]
    assert check_source(release, hooks) == []


def test_differences_name_the_hook_and_what_changed(release):
    differences = check_source(
        release,
        [
            Hook("eng.worker.runner:Runner._sample", params=("logits", "spec_decode_metadata")),
            Hook("eng.worker.gone:Runner"),
            Hook("eng.core:missing"),
            Hook("eng.core:helper", kind="class"),
            Hook("eng.worker.runner:alias", params=("a",)),
            Hook("eng.worker.runner:Runner.absent"),
        ],
    )
    assert differences == [
        "eng.worker.runner:Runner._sample: parameters are ['logits', 'spec'], "
        "expected to start with ['logits', 'spec_decode_metadata']",
        "eng.worker.gone:Runner: missing (module eng.worker.gone is not in the release)",
        "eng.core:missing: missing (missing is not defined in eng.core)",
        "eng.core:helper: expected a class, found FunctionDef",
        "eng.worker.runner:alias: bound by an assignment; its parameters cannot be read from the source",
        "eng.worker.runner:Runner.absent: missing (Runner.absent is not defined)",
    ]
