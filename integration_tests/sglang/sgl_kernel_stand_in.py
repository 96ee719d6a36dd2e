"""A test-only stand-in for `sgl_kernel`, SGLang's CUDA-only kernel library.

PyPI's sgl_kernel loads CUDA binaries at import, so on a CPU machine every SGLang module that
imports it fails to import, even when the code a test runs never calls a CUDA op. `install()`
puts a module finder first on sys.meta_path that answers `sgl_kernel` and `sgl_kernel.*`:
- the package itself is an empty module whose every attribute is a function that raises when
  called (the CUDA ops it would re-export);
- a submodule is the real one when its file is plain Python that imports without CUDA (such as
  `sgl_kernel.scalar_type`), else such an empty module.
So whatever runs is SGLang's own Python and Triton code, sgl_kernel's plain Python, or ours; a
path that would need a CUDA op fails loudly instead of silently using something else.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

PACKAGE = "sgl_kernel"


class StandInCalled(RuntimeError):
    pass


def _op(qualname: str):
    def op(*args, **kwargs):
        raise StandInCalled(f"{qualname} is a CUDA op of sgl_kernel; the CPU test stand-in cannot run it")

    op.__qualname__ = op.__name__ = qualname
    return op


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _op(f"{self.__name__}.{name}")


def _real_folder() -> list[str]:
    spec = importlib.machinery.PathFinder.find_spec(PACKAGE)
    return list(spec.submodule_search_locations or []) if spec else []


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.real = _real_folder()

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE or fullname.startswith(PACKAGE + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name != PACKAGE:
            real = importlib.machinery.PathFinder.find_spec(spec.name, self.real)
            if real is not None and isinstance(real.loader, importlib.machinery.SourceFileLoader):
                module = importlib.util.module_from_spec(real)
                sys.modules[spec.name] = module
                try:
                    real.loader.exec_module(module)
                    module.__sgl_kernel_stand_in_real__ = True
                    return module
                except Exception:
                    del sys.modules[spec.name]
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        if not getattr(module, "__sgl_kernel_stand_in_real__", False):
            module.__version__ = "0.0.0+cpu-test-stand-in"


def install() -> None:
    """Idempotent. Must run before anything imports the real sgl_kernel."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    if PACKAGE in sys.modules and not isinstance(sys.modules[PACKAGE], _StandInModule):
        raise RuntimeError("the real sgl_kernel was imported before the stand-in was installed")
    sys.meta_path.insert(0, _Finder())
