"""The feature store: rows found by shared tokens, exact against a reference, capacity kept."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sagespec.common.drafters import NgramDrafter
from sagespec.common.feature_store import FeatureStore, common_prefix
from sagespec.common.policies import ChainPolicy
from sagespec.common.speculator import DraftRequest, Speculator
from sagespec.common.verify.acceptance import Acceptance


def features_of(tokens: list[int]) -> torch.Tensor:
    """A stand-in target: position p's features depend on tokens[: p + 1] only (a prefix hash)."""
    rows, h = [], 0
    for t in tokens:
        h = (h * 31 + t + 1) % 10007
        rows.append([float(h), float(t)])
    return torch.tensor(rows)


sequences = st.lists(st.integers(0, 3), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(sequences, min_size=1, max_size=6), sequences, st.data())
def test_rows_are_the_features_of_the_asked_tokens(stored, asked, data):
    store = FeatureStore(capacity=1000)
    for seq in stored:
        store.put(torch.tensor(seq), features_of(seq))
    start = data.draw(st.integers(0, len(asked) - 1))
    stop = data.draw(st.integers(start + 1, len(asked)))
    rows = store.rows(torch.tensor(asked), start, stop)
    # the longest run from `start` that one stored sequence shares
    best = max(min(common_prefix(torch.tensor(s), torch.tensor(asked[:stop])), len(s)) for s in stored)
    if best <= start:
        assert rows is None
    else:
        assert rows.shape[0] == best - start
        assert torch.equal(rows, features_of(asked)[start:best])


def test_capacity_drops_the_least_recently_used_and_extensions_replace():
    store = FeatureStore(capacity=10)
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    store.put(torch.tensor(a), features_of(a))
    store.put(torch.tensor(b), features_of(b))
    assert store.rows(torch.tensor(a), 0, 4) is not None  # a is now the most recent
    c = [9, 9, 9]
    store.put(torch.tensor(c), features_of(c))  # 11 positions: b goes
    assert store.positions == 7 and store.rows(torch.tensor(b), 0, 4) is None
    longer = a + [0, 0]
    store.put(torch.tensor(longer), features_of(longer))  # extends a: a's entry is dropped
    assert store.positions == 9 and len(store.entries) == 2
    assert torch.equal(store.rows(torch.tensor(longer), 2, 6), features_of(longer)[2:6])
    small = FeatureStore(capacity=3)
    small.put(torch.tensor(a), features_of(a))  # longer than the capacity: not kept
    assert small.positions == 0 and not small.entries
    assert store.hits == 2 and store.served == 8


def test_a_prefix_cache_hit_gets_the_ended_requests_features():
    speculator = Speculator(
        lambda: ChainPolicy(depth=2), lambda: NgramDrafter(2, 1), Acceptance("auto"), None, FeatureStore()
    )
    first = [4, 5, 6, 7, 4, 5]
    speculator.commit_features("turn1", features_of(first)[:-1])  # every committed position but the root
    speculator.draft([DraftRequest("turn1", torch.tensor(first))])
    speculator.retain([])  # turn 1 ended: its features go to the store
    second = first + [9, 9, 8]
    # the engine's cache served positions 0..5; it runs 6..7 (8 is the root)
    speculator.commit_features("turn2", features_of(second)[6:8], start=6, tokens=torch.tensor(second[:6]))
    assert torch.equal(speculator.requests["turn2"].features[:5], features_of(second)[:5])
    assert speculator.requests["turn2"].features[5].abs().sum() == 0  # turn 1's root never had features
    assert torch.equal(speculator.requests["turn2"].features[6:], features_of(second)[6:8])
    assert speculator.requests["turn2"].stored_rows == 5
    # a request still running lends its rows too (the engine served turn 4 from turn 2's blocks)
    speculator.draft([DraftRequest("turn2", torch.tensor(second))])
    speculator.commit_features("turn4", features_of(second)[7:8], start=7, tokens=torch.tensor(second[:7]))
    assert torch.equal(speculator.requests["turn4"].features[6], features_of(second)[6])
    # without tokens (or without a store) the gap is zeros, as before
    speculator.commit_features("turn3", features_of(second)[6:8], start=6)
    assert speculator.requests["turn3"].features[:6].abs().sum() == 0
