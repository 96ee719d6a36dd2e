"""Starting vLLM in-process for a test, and reading its spec-decode counters."""

from __future__ import annotations

import gc
from contextlib import contextmanager

from sagespec.plugins.vllm.metrics import spec_decode_counters


@contextmanager
def engine(model, spec=None, max_num_seqs: int = 8, dtype: str = "float32", max_model_len: int = 2048, **kwargs):
    """One LLM at a time (2 cores): it is shut down and its memory freed on exit."""
    from vllm import LLM
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    spec = fixed_budget(spec)
    try:
        llm = LLM(
            model=str(model),
            dtype=dtype,
            enforce_eager=True,
            speculative_config=spec,
            max_model_len=max_model_len,
            seed=0,
            max_num_seqs=max_num_seqs,
            disable_log_stats=False,
            **kwargs,
        )
    except Exception:  # refused at startup: the next engine in this process must start clean
        gc.collect()
        cleanup_dist_env_and_memory()
        raise
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()


def fixed_budget(spec):
    """Lane tests check trees, drafters and verification, so a sage config drafts its whole budget
    each step unless the test asks for "budget" itself (cost-aware sizing may draft nothing on tiny
    models, which would leave a test of trees with no trees)."""
    if isinstance(spec, dict) and spec.get("method") == "sage" and "budget" not in spec:
        return {**spec, "budget": spec.get("num_speculative_tokens", spec.get("max_budget", 8))}
    return spec


def greedy_tokens(llm, prompts, max_tokens: int, with_marks: bool = False):
    """Token ids per prompt; with_marks: (those, each output's lossy-acceptance mark or None)."""
    from vllm import SamplingParams, TokensPrompt

    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts],
        SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=False),
        use_tqdm=False,
    )
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    if not with_marks:
        return tokens
    return tokens, [getattr(o, "sagespec_lossy_acceptance", None) for o in outs]


def counters_during(llm, work):
    """(work's result, the change in vLLM's spec-decode counters while it ran)."""
    before = spec_decode_counters(llm)
    result = work()
    after = spec_decode_counters(llm)
    return result, {k: after[k] - before[k] for k in before}


def live_proposer():
    """The live in-process sage engine's proposer."""
    from sagespec.plugins.vllm.proposer import SageProposer

    proposers = list(SageProposer.live)
    assert len(proposers) == 1, f"expected one live sage proposer, found {len(proposers)}"
    return proposers[0]


def shape_stats():
    """Tree-shape statistics of the live in-process sage engine's proposer."""
    return live_proposer().stats
