"""SGLang's own engine on this CPU machine, without speculation: the reference the sage worker's
greedy identity will be checked against. It runs with SGLang's CPU engine switch, its torch_native
attention backend and the test-only sgl_kernel stand-in in every SGLang process, so this also
checks that no path of plain greedy decoding needs a CUDA op of sgl_kernel (the stand-in raises)."""

import json
import os

from sglang_lane import last_json, run_python

HERE = os.path.dirname(os.path.abspath(__file__))

ENGINE = """
    import json, sys
    import torch
    from tiny_models import tiny_llama

    if __name__ == "__main__":  # SGLang spawns its processes
        folder, prompts = sys.argv[1], json.loads(sys.argv[2])
        model = tiny_llama(vocab_size=256)
        model.save_pretrained(folder)
        import sglang
        import sgl_kernel
        engine = sglang.Engine(model_path=folder, device="cpu", attention_backend="torch_native", dtype="float32",
                               skip_tokenizer_init=True, disable_cuda_graph=True, disable_overlap_schedule=True,
                               mem_fraction_static=0.2, max_total_tokens=4096, log_level="error")
        try:
            out = engine.generate(input_ids=prompts, sampling_params={"temperature": 0, "max_new_tokens": 16})
        finally:
            engine.shutdown()
        with torch.no_grad():
            ref = [model.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False)[0, len(p):].tolist()
                   for p in prompts]
        print(json.dumps({"sglang": [o["output_ids"] for o in out], "transformers": ref,
                          "stand_in": sgl_kernel.__version__}))
"""


def test_sglang_cpu_engine_greedy_equals_transformers(tmp_path):
    prompts = [[5, 6, 7, 8], [40, 41, 42, 43, 44, 45, 46]]
    env = {
        **os.environ,
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "stand_in_site"), os.path.join(HERE, "..", "..", "tests")]),
    }
    out = last_json(run_python(ENGINE, str(tmp_path / "tiny"), json.dumps(prompts), env=env))
    assert out["stand_in"].endswith("cpu-test-stand-in")
    assert out["sglang"] == out["transformers"]
    assert all(len(t) == 16 for t in out["sglang"])
