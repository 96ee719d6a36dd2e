"""The worker reads each request's sampling from SGLang's own SamplingParams, after SGLang has
normalised them (temperature 0 becomes top_k 1 at temperature 1; no top-k becomes a huge top_k)."""

from types import SimpleNamespace

import pytest

from sagespec.common.sampling import SamplingParams
from sagespec.plugins.sglang.request_options import request_params


def sglang_request(**kwargs):
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLangParams

    params = SGLangParams(**kwargs)
    params.normalize(None)
    return SimpleNamespace(sampling_params=params)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"temperature": 0.0}, SamplingParams()),
        ({"temperature": 0.7, "top_k": 1}, SamplingParams()),
        ({"temperature": 0.7}, SamplingParams(temperature=0.7)),
        ({"temperature": 1.0, "top_k": 20, "top_p": 0.9}, SamplingParams(temperature=1.0, top_k=20, top_p=0.9)),
    ],
)
def test_request_params_after_sglang_normalises_them(kwargs, expected):
    assert request_params(sglang_request(**kwargs)) == expected
