"""vLLM's own `method: eagle3`, loading the shipped head through sagespec's exporter, drafts what
sagespec's EAGLE chain drafts with the same head: same outputs, same acceptance (fp32)."""

import json
import os
import subprocess
import sys
import textwrap

from vllm_lane import counters_during, engine, greedy_tokens

MAX_TOKENS = 64
NUM_PROMPTS = 4
DEPTH = 4

# vLLM's eagle3 runs in its own process: some of vLLM's methods leave process state behind that
# breaks the next engine in the same process.
EAGLE3_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
from vllm_lane import counters_during, engine, greedy_tokens
prompts = json.loads(sys.argv[1])
spec = {{"method": "eagle3", "model": {export!r}, "num_speculative_tokens": {depth}}}
with engine({model!r}, spec=spec, max_num_seqs=1) as llm:
    outputs, counts = counters_during(llm, lambda: greedy_tokens(llm, prompts, {max_tokens}))
print("RESULT " + json.dumps({{"outputs": outputs, "counts": counts}}))
"""


def test_vllm_eagle3_with_exported_head_accepts_what_sage_accepts(smollm2_folder, mtbench_prompts, tmp_path):
    import torch

    from sagespec.common.shipped import shipped_head
    from sagespec.plugins.transformers.drafter_export import export_head_for_vllm

    export = export_head_for_vllm(shipped_head("smollm2"), smollm2_folder, tmp_path / "eagle3", dtype=torch.float32)
    prompts = mtbench_prompts[:NUM_PROMPTS]

    script = textwrap.dedent(EAGLE3_SCRIPT).format(
        here=os.path.dirname(os.path.abspath(__file__)),
        export=str(export),
        model=str(smollm2_folder),
        depth=DEPTH,
        max_tokens=MAX_TOKENS,
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(prompts)], capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"vLLM eagle3 run failed:\n{done.stderr[-3000:]}"
    theirs = json.loads(lines[-1].removeprefix("RESULT "))

    spec = {"method": "sage", "drafter": "eagle", "policy": "chain", "num_speculative_tokens": DEPTH}
    with engine(smollm2_folder, spec=spec, max_num_seqs=1) as llm:
        outputs, counts = counters_during(llm, lambda: greedy_tokens(llm, prompts, MAX_TOKENS))

    assert outputs == theirs["outputs"]
    ours_accepted = counts["vllm:spec_decode_num_accepted_tokens"]
    their_accepted = theirs["counts"]["vllm:spec_decode_num_accepted_tokens"]
    assert ours_accepted > 0
    # The same head and computation in fp32: only near-ties of the draft's argmax may differ.
    assert abs(ours_accepted - their_accepted) <= 0.05 * ours_accepted + 1, (ours_accepted, their_accepted)
