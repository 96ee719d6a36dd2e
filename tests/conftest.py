import os

# Triton's interpreter must be chosen before triton is first imported; torch threads are pinned
# (two torch-heavy processes or oversubscribed threads are ~10x slower on small machines).
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def smollm2_fp32():
    """The real default model in fp32 (exactness checks) with its tokenizer."""
    from sagespec.plugins.transformers.factory import load_target

    return load_target("smollm2", "float32")
