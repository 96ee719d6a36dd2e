"""The suffix drafter: its cache finds exactly the longest matches a brute-force scan finds (across
requests, never across a request's end, forgetting evicted text), its trees follow continuation
counts, later requests draft from earlier ones through the speculator, and bad options are named."""

import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sagespec.common.drafters import DraftContext, SuffixCache, SuffixDrafter, check_lookup_options, lookup_drafters
from sagespec.common.drafters.suffix import frequency_tree, own_matches
from sagespec.common.drafters.suffix_cache import SEPARATOR, _hash, _hashes
from sagespec.common.params import ConfigError
from sagespec.common.policies import DynamicPolicy, TreeShape
from sagespec.common.sampling import SamplingParams
from sagespec.common.speculator import DraftRequest, Speculator
from sagespec.common.verify.acceptance import Acceptance


def brute_matches(text: list[int], context: list[int], max_match: int, min_len: int = 2):
    """Longest match (>= min_len) of context's end in text, and every end position with it, newest first."""
    best, ends = 0, []
    for e in range(len(text)):
        n = 0
        while n < min(max_match, len(context)) and e - n >= 0 and text[e - n] == context[-1 - n]:
            n += 1
        if n < min_len:
            continue
        if n > best:
            best, ends = n, [e]
        elif n == best:
            ends.append(e)
    return best, ends[::-1]


def live_text(cache: SuffixCache) -> tuple[int, list[int]]:
    """(first live position, the live ring contents in position order)."""
    first = max(0, cache.end - cache.capacity)
    return first, [int(cache.tokens[p % cache.capacity]) for p in range(first, cache.end)]


sequences = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=60), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(sequences, st.lists(st.integers(0, 5), min_size=2, max_size=20), st.integers(2, 12))
def test_cache_finds_every_longest_match_a_scan_finds(seqs, context, max_match):
    cache = SuffixCache(max_tokens=1024, max_candidates=4096)  # small: sequences wrap and evict
    for seq in seqs:
        cache.add(seq)
    first, text = live_text(cache)
    best, ends = brute_matches(text, context, max_match, min_len=1)
    found_len, found = cache.matches(np.array(context), max_match)
    assert found_len == best
    assert found == [first + e for e in ends]


@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=8))
def test_one_window_hashes_as_the_vectorised_index_does(pattern):
    pattern = np.array(pattern)
    assert _hash(pattern) == int(_hashes(pattern, pattern.size)[0])


def test_matches_never_cross_a_request_end_and_continuations_stop_there():
    cache = SuffixCache(max_tokens=1024)
    cache.add([1, 2, 3])
    cache.add([4, 5, 6, 7])
    assert cache.matches(np.array([9, 3, 4]), 8) == (1, [4])  # 4 alone: 3|4 spans two requests
    length, ends = cache.matches(np.array([9, 2, 3]), 8)
    assert (length, cache.continuations(ends, 5)) == (2, [[]])  # nothing followed 2 3
    length, ends = cache.matches(np.array([4, 5]), 8)
    assert (length, cache.continuations(ends, 5)) == (2, [[6, 7]])
    assert cache.tokens[3] == SEPARATOR


def test_evicted_text_is_forgotten_and_memory_stays_fixed():
    cache = SuffixCache(max_tokens=1024)
    cache.add([7, 8, 9, 10])
    size = cache.tokens.nbytes + cache.prev.nbytes + cache.head.nbytes
    for i in range(50):
        cache.add(list(range(100 + i * 40, 140 + i * 40)))  # distinct text, 2000+ tokens
    assert cache.matches(np.array([7, 8, 9]), 8) == (0, [])
    assert cache.matches(np.array([2058, 2059]), 8)[0] == 2
    assert cache.tokens.nbytes + cache.prev.nbytes + cache.head.nbytes == size


def test_own_matches_take_the_longest_newest_first():
    seq = np.array([5, 6, 7, 1, 2, 6, 7, 3, 9, 6, 7])
    assert own_matches(seq, 8) == (2, [6, 2])
    assert own_matches(np.array([1, 2, 3, 4]), 8) == (0, [])


def test_trees_follow_counts_within_width_depth_budget_and_min_prob():
    conts = [[1, 2, 3], [1, 2, 4], [1, 5], [6], [1, 2, 3]]
    tree = frequency_tree(0, conts, depth=3, width=2, budget=10, min_prob=0.0)
    paths = {tuple(tree.tokens[tree.path_to(n)].tolist()[1:]) for n in range(1, tree.num_nodes)}
    assert paths == {(1,), (6,), (1, 2), (1, 5), (1, 2, 3), (1, 2, 4)}
    assert tree.tokens[tree.children(0)[0]] == 1  # most counted child is rank 0
    narrow = frequency_tree(0, conts, depth=2, width=1, budget=10, min_prob=0.0)
    assert narrow.tokens.tolist() == [0, 1, 2]
    # confidence: a node's count over its parent's (1 continues 4 of 5 occurrences, 2 three of those 4)
    assert narrow.confidence.tolist() == pytest.approx([1.0, 4 / 5, 3 / 4])
    for node in range(1, tree.num_nodes):
        children = tree.children(node)
        assert sum(float(tree.confidence[c]) for c in children) <= 1.0 + 1e-6
    frequent = frequency_tree(0, conts, depth=3, width=4, budget=10, min_prob=0.5)
    assert frequent.tokens.tolist() == [0, 1, 2]  # 1: 4/5, 2: 3/5, 3: 2/5 cut
    assert frequency_tree(0, conts, depth=3, width=4, budget=2, min_prob=0.0).num_drafted == 2


def test_static_topologies_keep_their_ranks():
    cache = SuffixCache(max_tokens=1024)
    for cont in ([4, 5, 6], [4, 5, 7], [8, 9]):
        cache.add([1, 2, 3, *cont])
    drafter = SuffixDrafter(cache)
    shape = TreeShape(depth=2, width=1, budget=2, paths=((0,), (1,)))
    tree = drafter.propose(DraftContext(torch.tensor([2, 3])), shape, SamplingParams(), None)
    assert tree.rank_paths() == [(0,), (1,)]
    assert tree.tokens.tolist() == [3, 4, 8]
    assert tree.confidence.tolist() == pytest.approx([1.0, 2 / 3, 1 / 3])  # kept with their nodes


def test_a_later_request_drafts_what_an_earlier_one_said():
    policy = lambda: DynamicPolicy(depth=6, width=2, budget=8)  # noqa: E731
    speculator = Speculator(policy, lookup_drafters("suffix", {}), Acceptance("strict"))
    answer = list(range(40, 56))
    speculator.draft([DraftRequest("a", torch.tensor([1, 2, 3, *answer]))])
    speculator.retain([])  # "a" ends: its text joins the cache
    later = torch.tensor([9, 9, 1, 2, 3, 40, 41, 42])
    tree = speculator.draft([DraftRequest("b", later)])[0]
    assert tree.tokens[tree.path_to(tree.num_nodes - 1)].tolist() == answer[2:9]  # root 42, then 6 deep
    alone = Speculator(policy, lookup_drafters("suffix", {}), Acceptance("strict"))
    assert alone.draft([DraftRequest("b", later)])[0].num_drafted == 0


def test_short_matches_draft_little():
    cache = SuffixCache(max_tokens=1024)
    cache.add([1, 2, 3, 4, 5, 6, 7, 8, 9])
    shape = TreeShape(depth=8, width=1, budget=8)
    draft = lambda factor, context: SuffixDrafter(cache, max_spec_factor=factor).propose(  # noqa: E731
        DraftContext(torch.tensor(context)), shape, SamplingParams(), None
    )
    assert draft(1.0, [0, 2, 3]).tokens.tolist() == [3, 4, 5]  # match 2: 2 drafted
    assert draft(1.0, [1, 2, 3]).tokens.tolist() == [3, 4, 5, 6]  # match 3: 3 drafted
    assert draft(4.0, [0, 2, 3]).tokens.tolist() == [3, 4, 5, 6, 7, 8, 9]  # up to the sequence's end


def test_the_cache_is_safe_under_concurrent_requests():
    cache = SuffixCache(max_tokens=4096)
    rng = np.random.default_rng(0)
    failures = []

    def work(seed):
        local = np.random.default_rng(seed)
        try:
            for _ in range(200):
                cache.add(local.integers(0, 20, 30))
                _length, ends = cache.matches(local.integers(0, 20, 8), 8)
                cache.continuations(ends, 4)
        except Exception as e:
            failures.append(e)

    threads = [threading.Thread(target=work, args=(int(rng.integers(1 << 30)),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert cache.sequences == 800
    _first, text = live_text(cache)
    context = np.array(text[-5:-1])  # a live sequence's end: found again
    assert cache.matches(context, 8)[0] >= 2


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_cached_tokens": 0}, "max_cached_tokens=0 is out of range; allowed: 1024 <= max_cached_tokens"),
        ({"max_candidates": 0}, "max_candidates=0 is out of range"),
        ({"min_prob": 1.5}, "min_prob=1.5 is out of range"),
        ({"min_match": 0}, "min_match=0 is out of range"),
        ({"min_match": 3, "max_match": 2}, "max_match=2 is out of range"),
        ({"max_spec_factor": 0}, "max_spec_factor=0.0 is out of range; allowed: 0.0 < max_spec_factor"),
        ({"window": 3}, "unknown option(s) ['window']"),
    ],
)
def test_bad_options_name_the_field(options, message):
    with pytest.raises(ConfigError, match="drafter 'suffix'") as e:
        check_lookup_options("suffix", options)
    assert message in str(e.value)
