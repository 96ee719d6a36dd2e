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

SUPPORTED_SGLANG = ("0.5.22", "0.5.23")   # releases the integration tests run against (also in README)
NAME = "SAGE"
SPEC = "sglang.srt.speculative.spec_info"
REGISTRY = "sglang.srt.speculative.spec_registry"

HOOKS = (
    Hook(f"{SPEC}:SpeculativeAlgorithm.register",
         params=("name", "supports_overlap", "validate_server_args", "spec_class")),
    Hook(f"{SPEC}:SpeculativeAlgorithm.from_string", params=("name",)),
    Hook(f"{REGISTRY}:CustomSpecAlgo", kind="class"),
    Hook(f"{REGISTRY}:CustomSpecAlgo.handle_server_args", params=("server_args",)),
    Hook(f"{REGISTRY}:CustomSpecAlgo.create_worker", params=("server_args",)),
    Hook("sglang.srt.managers.overlap_utils:FutureMap", kind="class",
         params=("device", "spec_algo", "req_to_token_pool", "needs_cpu_seq_lens", "needs_confidence_relay")),
    Hook("sglang.srt.speculative.base_spec_worker:BaseSpecWorker", kind="class"),
)

_state = {"done": False, "refused": None}


def validate_server_args(server_args) -> None:
    """SGLang's validation hook: every bad flag or JSON key fails here, named."""
    try:
        options = parse_server_args(server_args)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    from .worker import worker_limits
    refused = worker_limits(options)
    if refused:
        raise ValueError(f"{OWNER}: {refused}")


def spec_class():
    """CustomSpecAlgo with what SGLang's scheduler asks of every algorithm but the default lacks."""
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    class SageSpecAlgo(CustomSpecAlgo):
        def has_draft_kv(self) -> bool:
            return False  # the tree lives in the verify mask; drafters keep their own state

        def carries_draft_hidden_states(self) -> bool:
            return False

        def need_topk(self) -> bool:
            return False

        def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True,
                              needs_confidence_relay: bool = False):
            return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

        def handle_server_args(self, server_args) -> None:
            # SGLang sizes its verify buffers from these: write back what sage resolved. The
            # worker runs each step synchronously (plan from the last step's outcome).
            options = parse_server_args(server_args)
            server_args.speculative_num_draft_tokens = options.num_draft_tokens
            server_args.speculative_num_steps = options.num_steps
            server_args.speculative_eagle_topk = options.eagle_topk
            server_args.disable_overlap_schedule = True
            if options.drafter == "eagle":
                # The EAGLE head reads target features of every committed position; a prefix served
                # from SGLang's radix cache would come without them.
                server_args.disable_radix_cache = True

    return SageSpecAlgo


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
    SpeculativeAlgorithm.register(NAME, supports_overlap=False, validate_server_args=validate_server_args,
                                  spec_class=spec_class())(_worker_class)
    logger.info("sagespec: speculative algorithm 'sage' registered with SGLang")
    _install_cpu_paths()


def _worker_class(server_args):
    from .worker import worker_class
    return worker_class()[0]


def _install_cpu_paths() -> None:
    """SGLang's CPU engine lacks tree verification and, without sgl_kernel's CPU build, a few ops
    speculation uses; sage brings torch paths for those (cpu_paths), only on that engine."""
    from sglang.srt.utils import is_cpu
    if not is_cpu():
        return
    from . import cpu_paths
    differences = check_contract(cpu_paths.HOOKS)
    if differences:
        logger.warning("sagespec: SGLang's CPU engine differs from what sage's CPU paths rely on; sage will "
                       "not run on it: %s", "; ".join(differences))
        return
    cpu_paths.patches().apply()
