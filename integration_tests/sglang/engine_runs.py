"""Runs SGLang's engine on this CPU machine once per configuration, one after another, and prints
the outputs as JSON: `python engine_runs.py SPEC_JSON` (or the SPEC on standard input). SPEC: {"model": folder, "prompts": [[ids]],
"max_new_tokens": k, "configs": {name: extra Engine kwargs}, "one_at_a_time": bool or [config names],
"sampling": {extra sampling params} (default greedy), "per_prompt": [{sampling params of prompt i}]}.
With one_at_a_time (all configs, or those named) each prompt is generated alone and timed (wall
seconds per prompt). Run it with
SGLANG_USE_CPU_ENGINE=1 and stand_in_site on PYTHONPATH (see test_sage_engine.py); the SGLang
benchmark (benchmarks/sglang_speed.py) runs it too."""

import json
import sys
import time

BASE = dict(
    device="cpu",
    attention_backend="torch_native",
    dtype="float32",
    skip_tokenizer_init=True,
    disable_cuda_graph=True,
    disable_overlap_schedule=True,
    mem_fraction_static=0.2,
    max_total_tokens=8192,
    log_level="error",
)
META = (
    "completion_tokens",
    "spec_verify_ct",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "sagespec_lossy_acceptance",
    "sagespec_tree_shape",
)


def run(spec: dict) -> dict:
    import sglang

    params = {"temperature": 0, "max_new_tokens": spec["max_new_tokens"], **spec.get("sampling", {})}
    per_prompt = [{**params, **p} for p in spec.get("per_prompt", [{}] * len(spec["prompts"]))]
    alone = spec.get("one_at_a_time")
    results = {}
    for name, extra in spec["configs"].items():
        engine = sglang.Engine(model_path=spec["model"], **BASE, **extra)
        try:
            if alone is True or (isinstance(alone, list) and name in alone):
                engine.generate(input_ids=[spec["prompts"][0]], sampling_params={**params, "max_new_tokens": 4})
                outs, seconds = [], []
                for prompt, prompt_params in zip(spec["prompts"], per_prompt):
                    start = time.perf_counter()
                    outs += engine.generate(input_ids=[prompt], sampling_params=prompt_params)
                    seconds.append(time.perf_counter() - start)
            else:
                outs, seconds = engine.generate(input_ids=spec["prompts"], sampling_params=per_prompt), None
        finally:
            engine.shutdown()
        results[name] = {
            "tokens": [o["output_ids"] for o in outs],
            "seconds": seconds,
            "meta": [{k: o["meta_info"].get(k) for k in META} for o in outs],
        }
    return results


if __name__ == "__main__":  # SGLang spawns its processes
    print(json.dumps(run(json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin))))
