"""The vLLM plugin: `--speculative-config '{"method": "sage", ...}'`.

Importing this package imports nothing of vLLM; vLLM calls `register()` through the
`vllm.general_plugins` entry point in each of its processes.
"""


def register() -> None:
    from .registration import register as _register

    _register()
