"""What machine a measurement ran on: the processor, the ISA features that change a CPU forward's
cost (native bf16 or emulated), cores and the torch build. Every benchmark JSON records it."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

# Flags that decide which kernels a CPU forward gets: bf16 without avx512_bf16/amx_bf16 is emulated.
FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def _cpuinfo_field(prefixes: tuple[str, ...]) -> str | None:
    """The value of the first /proc/cpuinfo line starting with one of `prefixes`."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1] for line in lines if line.startswith(prefixes)), None)


def cpu_flags() -> set[str]:
    return set((_cpuinfo_field(("flags", "Features")) or "").split())


def cpu_model() -> str:
    name = _cpuinfo_field(("model name",))
    return name.strip() if name else platform.processor() or platform.machine()


def machine_info() -> dict:
    flags = cpu_flags()
    return {
        "cpu": cpu_model(),
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "features": {f: f in flags for f in FEATURES},
        "native_bf16": bool(flags & {"avx512_bf16", "amx_bf16"}),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
