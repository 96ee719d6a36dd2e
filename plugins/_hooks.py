"""Patch bookkeeping and hook-contract checks shared by the engine plugins.

A plugin declares every engine attribute it patches or calls as a `Hook` (dotted path, kind, the
parameter names it relies on). `check_contract` resolves them all before anything is patched and
returns the list of differences; `Patches.apply` then installs every wrapper or none, records the
originals, and is idempotent (a second apply in the same process is a no-op).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

MARK = "__sagespec_original__"


@dataclass(frozen=True)
class Hook:
    path: str  # "package.module:Qualified.name"
    kind: str = "function"  # "function" | "class" | "attribute"
    params: tuple[str, ...] = ()  # parameter names the plugin passes or reads, in order


def resolve(path: str):
    module_name, _, qualname = path.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split(".") if qualname else ():
        obj = getattr(obj, part)
    return obj


def _difference(hook: Hook) -> str | None:
    try:
        obj = resolve(hook.path)
    except (ImportError, AttributeError) as e:
        return f"{hook.path}: missing ({type(e).__name__}: {e})"
    obj = getattr(obj, MARK, obj)  # check the engine's own function, not our wrapper
    if hook.kind == "class" and not inspect.isclass(obj):
        return f"{hook.path}: expected a class, found {type(obj).__name__}"
    if hook.kind == "function" and not callable(obj):
        return f"{hook.path}: expected a function, found {type(obj).__name__}"
    if hook.params:
        try:
            names = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            return f"{hook.path}: signature cannot be read"
        return parameter_difference(hook, names)
    return None


def parameter_difference(hook: Hook, names: list[str]) -> str | None:
    """The contract's check of a signature's parameter names (self and cls left out), shared by
    the import-time check here and the static one (`_hook_source`)."""
    names = [n for n in names if n not in ("self", "cls")]
    if names[: len(hook.params)] != list(hook.params):
        return f"{hook.path}: parameters are {names}, expected to start with {list(hook.params)}"
    return None


def check_contract(hooks) -> list[str]:
    """Every difference between the engine installed and what the plugin relies on."""
    return [d for d in (_difference(h) for h in hooks) if d is not None]


def refusal_reason(engine: str, version: str, supported, hooks) -> str | None:
    """Why a plugin must leave this engine release alone, or None: not a release it supports, or a
    hook that differs."""
    if version not in supported:
        return f"{engine} {version} is not a release sagespec supports (supported: {list(supported)})"
    differences = check_contract(hooks)
    if differences:
        return f"{engine} {version} differs from what sagespec relies on: " + "; ".join(differences)
    return None


@dataclass
class Patches:
    """Wrappers to install on engine attributes: (owner path, attribute, make_wrapper(original))."""

    entries: list[tuple[str, str, Callable]] = field(default_factory=list)

    def add(self, owner: str, attr: str, make_wrapper: Callable) -> None:
        self.entries.append((owner, attr, make_wrapper))

    def apply(self) -> bool:
        """Install all wrappers or none. False if they were already installed."""
        planned = []
        for owner_path, attr, make_wrapper in self.entries:
            owner = resolve(owner_path)
            original = owner.__dict__.get(attr, getattr(owner, attr))
            if hasattr(original, MARK) or hasattr(getattr(original, "__func__", None), MARK):
                return False
            wrapper = make_wrapper(original)
            setattr(wrapper, MARK, original)
            planned.append((owner, attr, wrapper))
        for owner, attr, wrapper in planned:
            setattr(owner, attr, wrapper)
        return True

    def undo(self) -> None:
        for owner_path, attr, _ in self.entries:
            owner = resolve(owner_path)
            current = owner.__dict__.get(attr)
            if current is not None and hasattr(current, MARK):
                setattr(owner, attr, getattr(current, MARK))
