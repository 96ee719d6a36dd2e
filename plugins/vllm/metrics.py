"""Reading vLLM's spec-decode counters from an in-process `LLM` (summed over their labels)."""

from __future__ import annotations

SPEC_DECODE_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)


def spec_decode_counters(llm) -> dict[str, float]:
    """Cumulative within the process (vLLM's metrics registry is global): diff two readings."""
    out = dict.fromkeys(SPEC_DECODE_COUNTERS, 0.0)
    for metric in llm.get_metrics():
        if metric.name in out:
            out[metric.name] += float(getattr(metric, "value", 0.0))
    return out
