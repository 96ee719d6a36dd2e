"""What machine a measurement ran on: the processor, the ISA features that change a CPU forward's
cost (native bf16 or emulated), cores and the torch build. Every benchmark JSON records it."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

# Flags that decide which kernels a CPU forward gets: bf16 without avx512_bf16/amx_bf16 is emulated.
FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
