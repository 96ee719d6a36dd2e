"""Running SGLang checks in a fresh Python process, as its launcher runs plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def run_python(code: str, *argv: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ) if env is None else env,
    )


def last_json(out: subprocess.CompletedProcess):
    """The last stdout line, as JSON (SGLang logs to stderr)."""
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
