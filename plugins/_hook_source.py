"""The hook contract checked against a release's source without importing it.

`check_contract` (in `_hooks`) resolves hooks in the engine installed. For releases that cannot be
installed here (GPU wheels, a newer engine), `check_source` reads the same `Hook` list against
the release's Python files, by parsing them: modules are found by path, names through the
module's definitions, then its imports (re-exports), then a class's bases; a function's parameters
come from its `def`, a class's from its `__init__` or, for a dataclass, its fields. What cannot be
read statically (a name bound by an assignment, a base the source does not define) is reported.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ._hooks import Hook, parameter_difference

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # statements that define a name
MAX_DEPTH = 12  # re-export and base-class hops followed before giving up


@dataclass(frozen=True)
class Found:
    """A name resolved in the source: its node and the module it is defined in."""

    node: ast.AST
    module: str


class SourceTree:
    """Python modules of one release, read on demand from a wheel, a folder or a dict of texts."""

    def __init__(self, read: Callable[[str], str | None]):
        self._read = read
        self._modules: dict[str, ast.Module | None] = {}

    @classmethod
    def from_wheel(cls, wheel: Path) -> SourceTree:
        archive = zipfile.ZipFile(wheel)
        names = set(archive.namelist())
        return cls(lambda path: archive.read(path).decode() if path in names else None)

    @classmethod
    def from_folder(cls, folder: Path) -> SourceTree:
        def read(path: str) -> str | None:
            file = folder / path
            return file.read_text() if file.is_file() else None

        return cls(read)

    def read(self, path: str) -> str | None:
        """The text of a file of the release ("pkg/mod.py"), or None."""
        return self._read(path)

    def module(self, name: str) -> ast.Module | None:
        if name not in self._modules:
            base = name.replace(".", "/")
            text = self._read(f"{base}.py")
            if text is None:
                text = self._read(f"{base}/__init__.py")
            self._modules[name] = None if text is None else ast.parse(text)
        return self._modules[name]

    def is_package(self, name: str) -> bool:
        return self._read(f"{name.replace('.', '/')}/__init__.py") is not None

    # ---- name resolution ---------------------------------------------------------------
    def lookup(self, module: str, qualname: str) -> Found | str:
        """The definition of `qualname` in `module`, or why it cannot be found."""
        parts = qualname.split(".")
        found = self._in_module(module, parts[0], 0)
        if isinstance(found, str):
            return found
        for part in parts[1:]:
            if not isinstance(found.node, ast.ClassDef):
                return f"{part!r} is looked up in {type(found.node).__name__}, not a class"
            member = self._in_class(found, part, 0)
            if isinstance(member, str):
                return member
            found = member
        return found

    def _in_module(self, module: str, name: str, depth: int) -> Found | str:
        if depth > MAX_DEPTH:
            return f"{module}.{name}: too many re-exports"
        tree = self.module(module)
        if tree is None:
            return f"module {module} is not in the release"
        for stmt in _top_level(tree.body):
            if isinstance(stmt, DEFINITIONS) and stmt.name == name:
                return Found(stmt, module)
        for stmt in _top_level(tree.body):
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        source = _absolute(module, stmt, self.is_package(module))
                        found = self._in_module(source, alias.name, depth + 1)
                        if isinstance(found, str) and self.module(f"{source}.{alias.name}") is not None:
                            return f"{module}.{name} is a module"
                        return found
            if _binds(stmt, name):
                return Found(stmt, module)
        for stmt in _top_level(tree.body):  # last, as Python would: `from x import *`
            if isinstance(stmt, ast.ImportFrom) and any(alias.name == "*" for alias in stmt.names):
                found = self._in_module(_absolute(module, stmt, self.is_package(module)), name, depth + 1)
                if not isinstance(found, str):
                    return found
        return f"{name} is not defined in {module}"

    def _in_class(self, cls: Found, name: str, depth: int) -> Found | str:
        if depth > MAX_DEPTH:
            return f"{name}: too many base classes"
        assert isinstance(cls.node, ast.ClassDef)  # callers pass classes only
        for stmt in _top_level(cls.node.body):
            if (isinstance(stmt, DEFINITIONS) and stmt.name == name) or _binds(stmt, name):
                return Found(stmt, cls.module)
        unread = []
        for base in cls.node.bases:
            parent = self._base(cls.module, base, depth)
            if isinstance(parent, str):
                unread.append(parent)
                continue
            member = self._in_class(parent, name, depth + 1)
            if not isinstance(member, str):
                return member
        where = f" (bases not read: {'; '.join(unread)})" if unread else ""
        return f"{cls.node.name}.{name} is not defined{where}"

    def _base(self, module: str, base: ast.expr, depth: int) -> Found | str:
        if not isinstance(base, ast.Name):
            return f"base {ast.unparse(base)} is not a plain name"
        found = self._in_module(module, base.id, depth + 1)
        if isinstance(found, str):
            return found
        if not isinstance(found.node, ast.ClassDef):
            return f"base {ast.unparse(base)} is not a class in the source"
        return found

    # ---- hooks -------------------------------------------------------------------------
    def difference(self, hook: Hook) -> str | None:
        module, _, qualname = hook.path.partition(":")
        found = self.lookup(module, qualname)
        if isinstance(found, str):
            return f"{hook.path}: missing ({found})"
        node = found.node
        if hook.kind == "class" and not isinstance(node, ast.ClassDef):
            return f"{hook.path}: expected a class, found {_kind(node)}"
        if hook.kind == "function" and not isinstance(node, DEFINITIONS):
            if hook.params:
                return f"{hook.path}: bound by {_kind(node)}; its parameters cannot be read from the source"
            return None
        if not hook.params:
            return None
        names = self.parameters(found)
        if isinstance(names, str):
            return f"{hook.path}: {names}"
        return parameter_difference(hook, names)

    def parameters(self, found: Found) -> list[str] | str:
        node = found.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return _parameter_names(node)
        if isinstance(node, ast.ClassDef):
            init = self._in_class(found, "__init__", 0)
            if not isinstance(init, str) and isinstance(init.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return _parameter_names(init.node)
            if any(_is_dataclass_decorator(d) for d in node.decorator_list):
                return [
                    s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                ]
            return f"the parameters of class {node.name} cannot be read from the source"
        return f"{_kind(node)} has no parameters to read"


def check_source(tree: SourceTree, hooks: Iterable[Hook]) -> list[str]:
    """Every difference between a release's source and what the plugin relies on."""
    return [d for d in (tree.difference(h) for h in hooks) if d is not None]


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements of a body, with those under `if` / `try` (version and import guards) included."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _top_level(stmt.body)
            for handler in stmt.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(stmt.orelse)


def _binds(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


def _absolute(module: str, stmt: ast.ImportFrom, is_package: bool) -> str:
    if not stmt.level:
        return stmt.module or ""
    parts = module.split(".")
    keep = len(parts) - stmt.level + (1 if is_package else 0)
    base = ".".join(parts[:keep])
    return f"{base}.{stmt.module}" if stmt.module else base


def _parameter_names(node: FunctionNode) -> list[str]:
    """In `inspect.signature` order: positional, *args, keyword-only, **kwargs."""
    args = node.args
    ordered = [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg]
    return [a.arg for a in ordered if a is not None]


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass"
    )


def _kind(node: ast.AST) -> str:
    return {ast.Assign: "an assignment", ast.AnnAssign: "an annotated assignment"}.get(type(node), type(node).__name__)
