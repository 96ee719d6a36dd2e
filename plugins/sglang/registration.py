"""Register 'sage' with SGLang's speculative-algorithm registry: version gate, hook contract, then
the registration or nothing.

Runs once per process from the `sglang.srt.plugins` entry point (SGLang loads it before parsing
arguments, in the engine, the scheduler and the detokenizer). If the installed SGLang is not one
we test against, or any hook we rely on differs, SGLang is left untouched and the reason is
logged; `--speculative-algorithm sage` then fails with SGLang's unknown-name error, and the log
says why.
"""

from __future__ import annotations

import logging

from sagespec.common.params import ConfigError
from sagespec.plugins._hooks import Hook, check_contract
from sagespec.plugins._hooks import refusal_reason as engine_refusal

from .options import OWNER, parse_server_args

logger = logging.getLogger("sglang.sagespec")  # under SGLang's logger: its handlers and level

# Releases sagespec runs on; the SGLang lane runs LANE_SGLANG (none is supported by the static hook
# check alone).
LANE_SGLANG = ("0.5.22", "0.5.23")
STATIC_SGLANG: tuple[str, ...] = ()
SUPPORTED_SGLANG = (*LANE_SGLANG, *STATIC_SGLANG)
NAME = "SAGE"
SPEC = "sglang.srt.speculative.spec_info"
REGISTRY = "sglang.srt.speculative.spec_registry"

HOOKS = (
    Hook(
        f"{SPEC}:SpeculativeAlgorithm.register",
        params=("name", "supports_overlap", "validate_server_args", "spec_class"),
    ),
    Hook(f"{SPEC}:SpeculativeAlgorithm.from_string", params=("name",)),
    Hook(f"{REGISTRY}:CustomSpecAlgo", kind="class"),
    Hook(f"{REGISTRY}:CustomSpecAlgo.handle_server_args", params=("server_args",)),
    Hook(f"{REGISTRY}:CustomSpecAlgo.create_worker", params=("server_args",)),
    Hook(
        "sglang.srt.managers.overlap_utils:FutureMap",
        kind="class",
        params=("device", "spec_algo", "req_to_token_pool", "needs_cpu_seq_lens", "needs_confidence_relay"),
    ),
    Hook("sglang.srt.speculative.base_spec_worker:BaseSpecWorker", kind="class"),
    # what the worker module imports
    Hook("sglang.srt.managers.utils:GenerationBatchResult", kind="class"),
    Hook("sglang.srt.model_executor.forward_batch_info:CaptureHiddenMode", kind="class"),
    Hook("sglang.srt.model_executor.forward_batch_info:ForwardMode", kind="class"),
    Hook("sglang.srt.runtime_context:get_device"),
    Hook("sglang.srt.speculative.ngram_info:NgramVerifyInput", kind="class"),
    Hook("sglang.srt.utils:is_cpu"),
)

_state = {"done": False, "refused": None}


def validate_server_args(server_args) -> None:
    """SGLang's validation hook: every bad flag or JSON key fails here, named."""
    try:
        options = parse_server_args(server_args)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    from .request_options import worker_limits

    refused = worker_limits(options)
    if refused:
        raise ValueError(f"{OWNER}: {refused}")


def refusal_reason() -> str | None:
    import sglang

    return engine_refusal("SGLang", getattr(sglang, "__version__", "unknown"), SUPPORTED_SGLANG, HOOKS)


def register() -> None:
    """Idempotent; never raises for an SGLang it cannot support (SGLang keeps running unmodified)."""
    if _state["done"]:
        return
    _state["done"] = True
    reason = refusal_reason()
    if reason is not None:
        _state["refused"] = reason
        logger.warning("sagespec: not registering speculative algorithm 'sage': %s", reason)
        return
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from .worker import SageSpecAlgo

    SpeculativeAlgorithm.register(
        NAME, supports_overlap=False, validate_server_args=validate_server_args, spec_class=SageSpecAlgo
    )(_worker_class)
    logger.info("sagespec: speculative algorithm 'sage' registered with SGLang")
    _install_cpu_paths()


def _worker_class(server_args):
    from .worker import SageWorker

    return SageWorker


def _install_cpu_paths() -> None:
    """SGLang's CPU engine lacks tree verification and, without sgl_kernel's CPU build, a few ops
    speculation uses; sage brings torch paths for those (cpu_paths), only on that engine."""
    from sglang.srt.utils import is_cpu

    if not is_cpu():
        return
    from . import cpu_paths

    differences = check_contract(cpu_paths.HOOKS)
    if differences:
        logger.warning(
            "sagespec: SGLang's CPU engine differs from what sage's CPU paths rely on; sage will not run on it: %s",
            "; ".join(differences),
        )
        return
    cpu_paths.patches().apply()
