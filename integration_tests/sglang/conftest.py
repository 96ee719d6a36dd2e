"""The SGLang lane: runs in its own environment (sglang from PyPI, see scripts/test_sglang.sh).

SGLang's wheel carries CUDA torch and a CUDA-only kernel library (sgl_kernel). On a CPU machine
this lane runs what works without a GPU: plugin discovery, server-argument resolution and the
speculative registry, each in a fresh Python process as SGLang's launcher does, with the real
sgl_kernel; and, in the pytest process, SGLang's Triton tree kernels under TRITON_INTERPRET=1 with
`sgl_kernel_stand_in` in place of sgl_kernel so that their modules import.
"""

import os
import sys

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRITON_INTERPRET", "1")  # SGLang's Triton kernels run on CPU tensors
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))  # tiny_models

import sgl_kernel_stand_in  # noqa: E402

sgl_kernel_stand_in.install()  # this process only: the fresh processes of the tests import no stand-in


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A Llama config folder: SGLang's argument resolution reads the model's config, not weights."""
    from transformers import LlamaConfig

    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def smollm2_folder():
    from sagespec.plugins.transformers.model_loading import smollm2_folder

    return str(smollm2_folder())


@pytest.fixture(scope="session")
def mtbench_8(smollm2_folder):
    """The first 8 MT-Bench first turns through SmolLM2's chat template, as token ids."""
    from sagespec.plugins.transformers.data.chat_prompts import chat_prompt_ids

    return chat_prompt_ids(smollm2_folder, 8)
