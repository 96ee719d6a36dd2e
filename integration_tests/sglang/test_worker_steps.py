"""The SGLang worker's step functions on constructed inputs (SGLang imported, no engine started):
the verify batch it lays out for SGLang's TARGET_VERIFY forward, and the accepted path's KV moved
behind each prefix in every layer of the token pool."""

from types import SimpleNamespace

import torch

from sagespec.common.tree import DraftTree

N = 4  # verify width
TREES = [DraftTree.from_parents([5, 1, 2, 3], [-1, 0, 0, 2]), DraftTree.from_parents([7, 8], [-1, 0])]


def bare_worker():
    from sagespec.plugins.sglang.worker import SageWorker

    worker = SageWorker.__new__(SageWorker)  # the step functions read only what is set here
    worker.n, worker.device = N, torch.device("cpu")
    return worker


def test_worker_classes_are_importable():
    from sglang.srt.speculative.base_spec_worker import BaseSpecWorker
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    from sagespec.plugins.sglang.worker import SageSpecAlgo, SageVerifyInput, SageWorker

    assert issubclass(SageWorker, BaseSpecWorker) and issubclass(SageSpecAlgo, CustomSpecAlgo)
    assert SageVerifyInput.sage_trees is None


def test_prepare_verify_lays_out_tokens_positions_slots_and_mask():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    req_to_token = torch.arange(2 * 64).view(2, 64) + 1000  # pool row r, column c -> slot 1000 + 64 r + c
    batch = SimpleNamespace(
        seq_lens=torch.tensor([10, 3]),
        req_pool_indices=torch.tensor([1, 0]),
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
    )
    bare_worker()._prepare_verify(batch, TREES)
    assert batch.forward_mode == ForwardMode.TARGET_VERIFY
    assert batch.input_ids.tolist() == [5, 1, 2, 3, 7, 8, 7, 7]  # padded with the root
    assert batch.out_cache_loc.tolist() == [1074, 1075, 1076, 1077, 1003, 1004, 1005, 1006]
    spec = batch.spec_info
    assert spec.positions.tolist() == [10, 11, 11, 12, 3, 4, 3, 3]  # prefix + depth; pads at the root's
    mask = spec.custom_mask.view(2, N, N)
    assert mask[0].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]
    assert mask[1].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]  # pads see themselves
    assert spec.sage_trees is TREES and spec.draft_token_num == N


def test_move_accepted_kv_in_every_layer():
    layers, slots = 3, 32
    g = torch.Generator().manual_seed(0)
    keys = [torch.randn(slots, 2, 8, generator=g) for _ in range(layers)]
    values = [torch.randn(slots, 2, 8, generator=g) for _ in range(layers)]
    before = [t.clone() for t in keys + values]
    pool = SimpleNamespace(layer_num=layers, get_key_buffer=keys.__getitem__, get_value_buffer=values.__getitem__)
    worker = bare_worker()
    worker.model_runner = SimpleNamespace(token_to_kv_pool=pool)
    out_cache_loc = torch.tensor([20, 3, 17, 9, 30, 31, 5, 6])
    # request 0 accepted nodes 0, 2, 3 (node 2 -> slot of row 1, node 3 -> row 2); request 1 only its root
    worker._move_accepted_kv(out_cache_loc, [(0, 2, 3), (0,)])
    for layer, (k, v) in enumerate(zip(keys, values)):
        for buffer, old in ((k, before[layer]), (v, before[layers + layer])):
            expected = old.clone()
            expected[3], expected[17] = old[17], old[9]
            assert torch.equal(buffer, expected)
