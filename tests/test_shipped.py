"""The shipped EAGLE head is chosen by the target it is given: the target config it was trained on
must match in hidden size, layer count and vocabulary."""

from types import SimpleNamespace

import pytest

from sagespec.common.params import ConfigError
from sagespec.common.shipped import shipped_head, shipped_head_for, shipped_heads

SMOLLM2 = SimpleNamespace(model_type="llama", hidden_size=576, num_hidden_layers=30, vocab_size=49152)


def test_the_default_models_head_is_found_by_its_config():
    assert shipped_head_for(SMOLLM2) == shipped_head("smollm2")
    assert shipped_heads() == {"smollm2-eagle3": {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152}}


@pytest.mark.parametrize(
    "change",
    [{"hidden_size": 640}, {"num_hidden_layers": 18}, {"vocab_size": 262144}, {"hidden_size": None}],
    ids=["hidden", "layers", "vocab", "missing"],
)
def test_another_target_gets_no_head(change):
    other = SimpleNamespace(**{**vars(SMOLLM2), **change})
    with pytest.raises(ConfigError, match=r"needs model: an EAGLE head folder; none shipped fits.*smollm2-eagle3"):
        shipped_head_for(other)
