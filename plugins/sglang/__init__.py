"""The SGLang plugin: `--speculative-algorithm sage`.

Importing this package imports nothing of SGLang; SGLang calls `register()` through the
`sglang.srt.plugins` entry point in each of its processes.
"""


def register() -> None:
    from .registration import register as _register

    _register()
