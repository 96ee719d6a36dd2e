"""`SuffixCache`: the text of finished requests, shared by every request of an engine, searched for
the longest suffix match of a live request's context.

Finished sequences are written one after another into a ring of `max_tokens` token slots, each
followed by a separator that no token equals, so no match or continuation crosses two requests.
Every position is indexed at a few match lengths (`LEVELS`) by hash chains, as LZ77 compressors
index their window: `head[level][hash of the n tokens ending at p]` is the newest such position and
`prev[level][p]` the one before it with the same hash. Adding a sequence costs O(length) numpy work;
a lookup walks at most `max_candidates` links per level and checks each against the tokens (hash
collisions cost a comparison, never a wrong draft). Memory is fixed by `max_tokens`; the oldest
text is overwritten first, and a link into overwritten slots ends its chain.

Invariants: positions are absolute (slot = position % capacity); a position p is live while
p >= end - capacity; every chain strictly decreases, so a walk ends.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from ..params import check_int

LEVELS = (1, 2, 4, 8)  # match lengths the chains index; longer matches are found by extension
SEPARATOR = -1  # written after each sequence; never a token id
DEFAULT_CACHED_TOKENS = 1 << 21
DEFAULT_CANDIDATES = 64
MIN_CACHED_TOKENS, MAX_CACHED_TOKENS = 1024, 1 << 28
MAX_CANDIDATES = 4096
_HASH_BITS = 20
_MULT_INT, _MASK64 = 0x9E3779B97F4A7C15, (1 << 64) - 1
_MULT = np.uint64(_MULT_INT)


def _hash(pattern: np.ndarray) -> int:
    """`_hashes(pattern, len(pattern))[0]` in Python integers (one window: no numpy overhead)."""
    h = 0
    for t in pattern.tolist():
        h = ((h ^ (t & _MASK64)) * _MULT_INT) & _MASK64
    return (h >> (64 - _HASH_BITS)) & ((1 << _HASH_BITS) - 1)


def _hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """Hash of each window of n tokens (window i = tokens[i : i + n]), in [0, 2**_HASH_BITS)."""
    windows = np.lib.stride_tricks.sliding_window_view(tokens.astype(np.uint64), n)
    h = np.zeros(windows.shape[0], dtype=np.uint64)
    for i in range(n):
        h = (h ^ windows[:, i]) * _MULT
    return ((h >> np.uint64(64 - _HASH_BITS)) & np.uint64((1 << _HASH_BITS) - 1)).astype(np.int64)


def backward_match_lengths(earlier: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Per row of `earlier` (the tokens going back from one occurrence's end, SEPARATOR where there
    are none), how many equal the context's tokens read back from its end."""
    limit = earlier.shape[1]
    same = earlier == context[::-1][:limit][None, :]
    return np.where(same.all(axis=1), limit, same.argmin(axis=1))


class SuffixCache:
    """Thread-safe: `add` and `matches` hold one lock."""

    def __init__(
        self,
        max_tokens: int = DEFAULT_CACHED_TOKENS,
        max_candidates: int = DEFAULT_CANDIDATES,
        owner: str = "suffix cache",
    ) -> None:
        self.capacity = check_int(owner, "max_cached_tokens", max_tokens, MIN_CACHED_TOKENS, MAX_CACHED_TOKENS)
        self.max_candidates = check_int(owner, "max_candidates", max_candidates, 1, MAX_CANDIDATES)
        self.tokens = np.full(self.capacity, SEPARATOR, dtype=np.int32)
        self.prev = np.full((len(LEVELS), self.capacity), -1, dtype=np.int64)
        self.head = np.full((len(LEVELS), 1 << _HASH_BITS), -1, dtype=np.int64)
        self.end = 0  # absolute position of the next write
        self.sequences = 0  # sequences added so far
        self.lock = threading.Lock()

    # ---- writing -------------------------------------------------------------------------
    def add(self, sequence: npt.ArrayLike) -> None:
        """Append one finished sequence (prompt and output); too long a sequence keeps its tail."""
        seq = np.asarray(sequence, dtype=np.int64).ravel()[-(self.capacity // 2) :]
        if seq.size == 0:
            return
        with self.lock:
            start = self.end
            slots = np.arange(start, start + seq.size + 1) % self.capacity
            self.tokens[slots] = np.append(seq, SEPARATOR)
            for level, n in enumerate(LEVELS):
                if seq.size >= n:
                    self._link(level, _hashes(seq, n), start + n - 1)
            self.end = start + seq.size + 1
            self.sequences += 1

    def _link(self, level: int, hashes: np.ndarray, first: int) -> None:
        """Chain positions first, first + 1, ... (one per hash, in order) into the level's index."""
        positions = np.arange(first, first + hashes.size, dtype=np.int64)
        order = np.argsort(hashes, kind="stable")  # same hash: position order kept
        h, pos = hashes[order], positions[order]
        starts_group = np.ones(h.size, dtype=bool)
        starts_group[1:] = h[1:] != h[:-1]
        prev = np.empty_like(pos)
        prev[1:] = pos[:-1]
        prev[starts_group] = self.head[level, h[starts_group]]  # the oldest in a group links to the older text
        self.prev[level, pos % self.capacity] = prev
        ends_group = np.ones(h.size, dtype=bool)
        ends_group[:-1] = starts_group[1:]
        self.head[level, h[ends_group]] = pos[ends_group]

    # ---- reading -------------------------------------------------------------------------
    def matches(self, context: np.ndarray, max_match: int, at_least: int = 0) -> tuple[int, list[int]]:
        """(length, positions): the longest match (at most max_match tokens) of the context's end in
        the cache, and the end position of each occurrence of that length, newest first. (0, [])
        when not even the last token occurs, or when no match can be longer than `at_least`."""
        with self.lock:
            first = max(self.end - self.capacity, 0)  # the oldest live position
            for level in range(len(LEVELS) - 1, -1, -1):
                n = LEVELS[level]
                if context.size < n or n > max_match:
                    continue
                pattern = context[-n:]
                chain: list[int] = []
                p, prev = int(self.head[level, _hash(pattern)]), self.prev[level]
                while p >= first + n - 1 and len(chain) < self.max_candidates:
                    chain.append(p)
                    nxt = int(prev[p % self.capacity])
                    if nxt >= p:  # a stale link from an overwritten slot
                        break
                    p = nxt
                if chain:
                    ends = np.asarray(chain, dtype=np.int64)
                    windows = self.tokens[(ends[:, None] - np.arange(n - 1, -1, -1)) % self.capacity]
                    ends = ends[(windows == pattern).all(axis=1)]  # hash collisions drop out here
                    if ends.size:
                        return self._longest(context, ends, max_match, first)
                if at_least >= n:  # nothing at this level: every match is shorter than n
                    return 0, []
            return 0, []

    def _longest(self, context: np.ndarray, ends: np.ndarray, max_match: int, first: int) -> tuple[int, list[int]]:
        limit = min(max_match, context.size)
        positions = ends[:, None] - np.arange(limit)[None, :]  # [occurrences, limit]
        cached = np.where(positions >= first, self.tokens[positions % self.capacity], SEPARATOR)
        lengths = backward_match_lengths(cached, context)
        best = int(lengths.max())
        return best, ends[lengths == best].tolist()

    def continuations(self, ends: list[int], depth: int) -> list[list[int]]:
        """Per end position, up to depth tokens after it, stopping at its sequence's end."""
        if not ends:
            return []
        with self.lock:
            positions = np.asarray(ends, dtype=np.int64)[:, None] + np.arange(1, depth + 1)
            live = (positions < self.end) & (positions >= self.end - self.capacity)
            rows = np.where(live, self.tokens[positions % self.capacity], SEPARATOR)
        stops = np.where((rows == SEPARATOR).any(axis=1), (rows == SEPARATOR).argmax(axis=1), depth)
        return [row[:stop] for row, stop in zip(rows.tolist(), stops.tolist())]
