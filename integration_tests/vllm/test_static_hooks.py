"""The static hook check (the one run for releases that cannot be installed here) agrees with the
import-time check on the vLLM installed, and names the hook in a scratch copy of that release
whose `_sample` lost a parameter name."""

from pathlib import Path

import vllm

from sagespec.plugins._hook_source import SourceTree, check_source
from sagespec.plugins._hooks import check_contract
from sagespec.plugins.vllm.registration import HOOKS

SITE = Path(vllm.__file__).resolve().parents[1]
RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def test_static_and_import_checks_agree_on_the_installed_release():
    assert check_contract(HOOKS) == []
    assert check_source(SourceTree.from_folder(SITE), HOOKS) == []


def test_a_scratch_copy_with_an_altered_hook_is_reported(tmp_path):
    text = (SITE / RUNNER).read_text()
    altered = text.replace(
        "        spec_decode_metadata: SpecDecodeMetadata | None,\n    ) -> SamplerOutput:",
        "        metadata: SpecDecodeMetadata | None,\n    ) -> SamplerOutput:",
        1,
    )
    assert altered != text, "the scratch edit no longer applies to this release's _sample"
    (tmp_path / RUNNER).parent.mkdir(parents=True)
    (tmp_path / RUNNER).write_text(altered)
    base = SourceTree.from_folder(SITE)
    scratch = SourceTree(lambda path: (tmp_path / path).read_text() if (tmp_path / path).is_file() else base.read(path))
    assert check_source(scratch, HOOKS) == [
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample: parameters are ['logits', 'metadata'], "
        "expected to start with ['logits', 'spec_decode_metadata']"
    ]
