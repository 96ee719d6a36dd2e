"""Startup behaviour: entry-point discovery, bad configs, and vLLM releases we do not support."""

import os
import subprocess
import sys
import textwrap

import pytest
from vllm_lane import engine


def run_python(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def test_entry_point_is_discovered_in_a_fresh_process():
    out = run_python("""
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        from sagespec.plugins._hooks import MARK
        from sagespec.plugins.vllm import registration
        print(registration._state, hasattr(GPUModelRunner._sample, MARK))
        registration.register()  # a second call changes nothing
        print(hasattr(getattr(GPUModelRunner._sample, MARK), MARK))
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:2] == ["{'done': True, 'refused': None} True", "False"]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"policy": "widest"}, "policy='widest' is not one of"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens=0 is out of range"),
        ({"drafter": "eagle", "model": "/nonexistent/head"}, "has no config.json"),
        ({"colour": "blue"}, "unknown option(s) ['colour']"),
    ],
)
def test_bad_config_fails_at_startup_naming_the_key(smollm2_folder, config, message):
    with pytest.raises(Exception) as err, engine(smollm2_folder, spec={"method": "sage", **config}):
        pass
    assert message in str(err.value) or message in repr(err.value.__cause__)


def test_model_runner_v2_is_refused_naming_what_to_set(smollm2_folder, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(Exception) as err, engine(smollm2_folder, spec={"method": "sage"}):
        pass
    message = str(err.value) + repr(err.value.__cause__)
    assert "V1 model runner" in message and "unset VLLM_USE_V2_MODEL_RUNNER or set it to 0" in message


GATE_SCRIPT = """
    import sys
    import vllm
    from vllm import LLM, SamplingParams, TokensPrompt
    {setup}
    model = sys.argv[1]
    try:
        LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=512,
            skip_tokenizer_init=True, speculative_config={"method": "sage"})
        print("SAGE-STARTED")
    except Exception as e:
        print("SAGE-REFUSED", e)
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from sagespec.plugins._hooks import MARK
    print("RUNNER-PATCHED", any(hasattr(getattr(GPUModelRunner, a), MARK)
                                for a in ("_sample", "propose_draft_token_ids")))
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=512, skip_tokenizer_init=True)
    out = llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3])],
                       SamplingParams(temperature=0, max_tokens=4, detokenize=False))
    print("PLAIN-OK", len(out[0].outputs[0].token_ids))
"""


@pytest.mark.parametrize(
    "setup, reason",
    [
        ('vllm.__version__ = "0.30.0"', "vLLM 0.30.0 is not a release sagespec supports"),
        (
            """
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    original = GPUModelRunner._sample
    def _sample(self, logits, metadata):  # same behaviour, renamed parameter
        return original(self, logits, metadata)
    GPUModelRunner._sample = _sample
    """,
            "GPUModelRunner._sample: parameters are ['logits', 'metadata']",
        ),
    ],
)
def test_unsupported_vllm_runs_unmodified_and_says_why(tiny_folder, setup, reason):
    code = textwrap.dedent(GATE_SCRIPT).replace("{setup}", textwrap.dedent(setup).strip())
    out = subprocess.run(
        [sys.executable, "-c", code, str(tiny_folder)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.split(" ")[0].isupper()]
    refused = next(line for line in lines if line.startswith("SAGE-"))
    assert refused.startswith("SAGE-REFUSED") and reason in refused, refused
    assert "RUNNER-PATCHED False" in lines
    assert "PLAIN-OK 4" in lines
    assert reason in out.stderr + out.stdout  # also logged once at registration
