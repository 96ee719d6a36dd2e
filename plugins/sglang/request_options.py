"""What a SGLang request and batch ask for, in sagespec's terms, and what the sage worker refuses
(pure Python: SGLang's objects are read by attribute, SGLang is not imported)."""

from __future__ import annotations

from sagespec.common.sampling import SamplingParams
from sagespec.common.verify import rule_needs_hidden

from .options import SageOptions

# meta_info keys, one entry per output token: the lossy rule that verified it (only under a lossy
# rule), and the tree shape ("depth x width") the policy planned for the step that emitted it.
LOSSY_META_KEY = "sagespec_lossy_acceptance"
SHAPE_META_KEY = "sagespec_tree_shape"
SGLANG_TOP_K_ALL = 1 << 30  # SGLang's stand-in for "no top-k"


def worker_limits(options: SageOptions) -> str | None:
    """What the SGLang worker cannot run yet, or None."""
    if options.drafter == "eagle" and rule_needs_hidden(options.acceptance):
        return (
            f"drafter 'eagle' with acceptance {options.acceptance!r} is not supported yet: SGLang's verify "
            f"forward returns either the EAGLE layers' states or the final hidden rows, not both"
        )
    return None


def unsupported_batch_options(batch) -> str | None:
    """Request options SGLang applies in its own sampler, which the sage worker's verification does
    not reproduce yet; a batch using any of them is refused rather than decoded differently."""
    info = batch.sampling_info
    orchestrator = getattr(info, "penalizer_orchestrator", None)
    found = [
        name
        for name, used in (
            ("frequency/presence/repetition penalties", bool(getattr(orchestrator, "is_required", False))),
            ("logit_bias", getattr(info, "logit_bias", None) is not None),
            ("min_p", bool(getattr(info, "need_min_p_sampling", False))),
            ("custom logit processors", bool(getattr(info, "has_custom_logit_processor", False))),
            ("grammars / structured output", bool(getattr(batch, "has_grammar", False))),
            ("logprobs", bool(getattr(batch, "return_logprob", False))),
        )
        if used
    ]
    return f"requests with {', '.join(found)} are not supported by the sage worker yet" if found else None


def record_per_token(req, key: str, count: int, value) -> None:
    """Appends `value` for `count` new output tokens to meta_info[key] of the request, which holds
    one entry per output token (None for tokens before the first entry, e.g. the prefill token).
    SGLang's `customized_info` channel slices these lists with the output tokens."""
    info = req.customized_info if req.customized_info is not None else {}
    values = info.setdefault(key, [])
    values.extend([None] * (len(req.output_ids) - len(values)))
    values.extend([value] * count)
    req.customized_info = info


def request_params(req) -> SamplingParams:
    """The request's sampling in sagespec's terms. SGLang stores temperature 0 as top_k 1 at
    temperature 1 and "no top-k" as a huge top_k (sampling_params.py); both of the first mean greedy."""
    sp = req.sampling_params
    temperature = float(getattr(sp, "temperature", 0.0) or 0.0)
    top_k = int(getattr(sp, "top_k", -1) or -1)
    if temperature <= 1e-6 or top_k == 1:
        return SamplingParams()
    return SamplingParams(
        temperature=temperature,
        top_k=top_k if 0 < top_k < SGLANG_TOP_K_ALL else 0,
        top_p=float(getattr(sp, "top_p", 1.0) or 1.0),
    )


def request_seed(req) -> int | None:
    """The request's `sampling_seed` (SGLang's per-request seed), when it set one."""
    seed = getattr(req.sampling_params, "sampling_seed", None)
    return int(seed) if seed is not None else None
