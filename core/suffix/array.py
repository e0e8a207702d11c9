"""A suffix array over token sequences: every suffix of every sequence, sorted by its first
`SORT_DEPTH` tokens, built in numpy and searched with the standard library's `bisect`.

The sequences are stored back to back, each followed by `SEPARATOR` (0xFFFFFFFF, larger than any
token id), so no pattern of token ids can match across two sequences and a continuation stops at its
sequence's end. The strings that start with one pattern are one contiguous range of the array;
the strings that continue it with token t are one sub-range, because the array is sorted. That is
all the drafter needs: the number of occurrences of a string is the size of its range, and the
continuation counts of a string are the sizes of its sub-ranges.

Sorting is prefix doubling (Manber & Myers): rank the suffixes by their first token, then by the
first 2, 4, ... tokens with one numpy argsort of (rank, rank k positions later) per round, stopping
at `SORT_DEPTH` tokens or when every rank is distinct. Suffixes equal in their first `SORT_DEPTH`
tokens keep an arbitrary (deterministic) order, so ranges are exact only for strings of at most
`SORT_DEPTH` tokens.

Searching compares big-endian byte strings of the tokens (lexicographic order of big-endian uint32
equals the numeric order of the ids), so one probe of a binary search is one bytes slice and one
comparison in C, whatever the pattern's length.

Sequences can be dropped without rebuilding (`without`): their suffixes stay in the array but no
longer count, through a prefix sum of the live entries in array order.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Sequence

import numpy as np

SEPARATOR = 0xFFFF_FFFF  # after each sequence; sorts after every token id
MAX_TOKEN_ID = 2**31  # token ids must lie in [0, MAX_TOKEN_ID)
SORT_DEPTH = 128  # ranges are exact for strings of up to this many tokens
_SCAN_BELOW = 32  # ranges this short are scanned entry by entry rather than bisected
_DENSE_FIRST_LIMIT = 1 << 21  # a per-token table of first-token ranges when the largest id is below this


def check_token_ids(ids: np.ndarray, what: str = "token ids") -> None:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= MAX_TOKEN_ID):
        raise ValueError(f"{what} must lie in [0, 2**31); got {int(ids.min())}..{int(ids.max())}")


def sort_suffixes(text: np.ndarray, depth: int = SORT_DEPTH) -> np.ndarray:
    """Start positions of the suffixes of `text` (uint32) in the order of their first `depth` tokens."""
    n = len(text)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    _, rank = np.unique(text, return_inverse=True)
    rank = rank.astype(np.int64).reshape(-1)
    order = np.argsort(rank)
    covered = 1
    while covered < depth and int(rank.max()) < n - 1:
        # rank < n <= 2**31, so (rank, next rank + 1) packs into one int64 key
        nxt = np.zeros(n, dtype=np.int64)
        nxt[: n - covered] = rank[covered:] + 1
        key = (rank << 32) | nxt
        order = np.argsort(key)
        sorted_key = key[order]
        new_group = np.empty(n, dtype=np.int64)
        new_group[0] = 0
        np.not_equal(sorted_key[1:], sorted_key[:-1], out=new_group[1:])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(new_group)
        covered *= 2
    return order.astype(np.int32)


class SuffixArray:
    """Immutable sorted suffixes of some token sequences; see the module docstring.

    `lengths[i]` is sequence i's length, `starts[i]` its offset in `text`. Ranges are half-open
    index intervals [lo, hi) of the array; `count(lo, hi)` counts the live entries among them.
    """

    def __init__(self, sequences: Sequence[Sequence[int] | np.ndarray]):
        arrays = [np.asarray(s).reshape(-1) for s in sequences]
        self.lengths = np.array([len(a) for a in arrays], dtype=np.int64)
        self.starts = np.zeros(len(arrays), dtype=np.int64)
        if len(arrays) > 1:
            self.starts[1:] = np.cumsum(self.lengths + 1)[:-1]
        text = np.full(int(self.lengths.sum()) + len(arrays), SEPARATOR, dtype=np.uint32)
        if self.lengths.sum():
            joined = np.concatenate(arrays).astype(np.int64, copy=False)
            check_token_ids(joined)
            # token j of sequence i sits at starts[i] + j: skip one separator slot per earlier sequence
            text[np.arange(len(joined)) + np.repeat(np.arange(len(arrays)), self.lengths)] = joined
        self.text = text
        self.sa = sort_suffixes(text)
        self._t = text.data  # a memoryview: scalar reads as Python ints
        self._sa = self.sa.data
        self._bytes = text.astype(">u4").tobytes()
        self._first: memoryview | None = None
        if len(text) and int(self.lengths.sum()) and int(text[text != SEPARATOR].max()) < _DENSE_FIRST_LIMIT:
            first_tokens = text[self.sa]
            top = int(first_tokens[first_tokens != SEPARATOR].max()) + 2
            table = np.searchsorted(first_tokens, np.arange(top, dtype=np.uint32), side="left").astype(np.int32)
            self._first = table.data
        self.live = np.ones(len(arrays), dtype=bool)
        self._live_prefix: memoryview | None = None  # None while every sequence is live
        self._live_prefix_np: np.ndarray | None = None

    # -- size ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.sa)

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def live_tokens(self) -> int:
        return int(self.lengths[self.live].sum())

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (text, suffix array, its byte copy, tables)."""
        total = self.text.nbytes + self.sa.nbytes + len(self._bytes) + self.lengths.nbytes + self.starts.nbytes
        total += self.live.nbytes
        if self._first is not None:
            total += self._first.nbytes
        if self._live_prefix_np is not None:
            total += self._live_prefix_np.nbytes
        return total

    # -- dropping sequences --------------------------------------------------------------------
    def without(self, indices: Sequence[int]) -> "SuffixArray":
        """A copy that no longer counts sequences `indices`: their suffixes stay in the (shared) arrays
        but count zero, through a new prefix sum of the live entries. The original is unchanged, so a
        lookup holding it reads a consistent snapshot."""
        out = copy.copy(self)
        out.live = self.live.copy()
        if len(indices):
            out.live[np.asarray(indices, dtype=np.int64)] = False
            live_pos = np.repeat(out.live, self.lengths + 1)  # each sequence and its separator
            prefix = np.zeros(len(self.sa) + 1, dtype=np.int32)
            np.cumsum(live_pos[self.sa], out=prefix[1:])
            out._live_prefix_np = prefix
            out._live_prefix = prefix.data
        return out

    def count(self, lo: int, hi: int) -> int:
        """Live suffixes among array entries [lo, hi)."""
        if self._live_prefix is None:
            return hi - lo
        return self._live_prefix[hi] - self._live_prefix[lo]

    def sequence_of(self, positions: np.ndarray) -> np.ndarray:
        """The sequence index of each text position."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    # -- searching ---------------------------------------------------------------------------
    def _first_range(self, token: int) -> tuple[int, int]:
        first = self._first
        if first is None:
            return 0, len(self.sa)
        if token + 1 >= len(first):
            return 0, 0
        return first[token], first[token + 1]

    def find(self, pattern: bytes) -> tuple[int, int]:
        """The range of the suffixes that start with `pattern` (big-endian uint32 bytes, non-empty)."""
        data, nb = self._bytes, len(pattern)
        lo, hi = self._first_range(int.from_bytes(pattern[:4], "big"))
        if lo >= hi or (nb == 4 and self._first is not None):
            return lo, hi

        def key(p: int) -> bytes:
            return data[4 * p : 4 * p + nb]

        lo = bisect.bisect_left(self._sa, pattern, lo, hi, key=key)
        hi = bisect.bisect_right(self._sa, pattern, lo, hi, key=key)
        return lo, hi

    def _lower(self, pattern: bytes) -> int:
        """The start of `pattern`'s range when it occurs (live), else -1."""
        if self._live_prefix is not None:
            lo, hi = self.find(pattern)
            return lo if self.count(lo, hi) > 0 else -1
        data, nb = self._bytes, len(pattern)
        lo, hi = self._first_range(int.from_bytes(pattern[:4], "big"))
        if lo >= hi:
            return -1
        if nb > 4 or self._first is None:
            lo = bisect.bisect_left(self._sa, pattern, lo, hi, key=lambda p: data[4 * p : 4 * p + nb])
        return lo if lo < hi and data[4 * self._sa[lo] : 4 * self._sa[lo] + nb] == pattern else -1

    def longest_match(self, tail: bytes, upper: int) -> tuple[int, int, int]:
        """The longest k <= `upper` such that the last k tokens of `tail` (big-endian uint32 bytes)
        occur here (live), and their range: (k, lo, hi); (0, 0, 0) when not even the last token does.

        Occurrence is monotone in k (a suffix of an occurrence occurs), so: try `upper` first (the
        common case when the previous step's match grew by the committed tokens), then bisect k."""
        upper = min(upper, len(tail) // 4, SORT_DEPTH)
        if upper <= 0:
            return 0, 0, 0
        lo = self._lower(tail[-4 * upper :])
        best = upper if lo >= 0 else 0
        if not best:
            bad = upper  # invariant: best occurs (0 trivially), bad does not
            while bad - best > 1:
                mid = (best + bad) // 2
                at = self._lower(tail[-4 * mid :])
                if at >= 0:
                    best, lo = mid, at
                else:
                    bad = mid
        if best == 0:
            return 0, 0, 0
        pattern, nb, data = tail[-4 * best :], 4 * best, self._bytes
        _, end = self._first_range(int.from_bytes(pattern[:4], "big"))
        hi = bisect.bisect_right(self._sa, pattern, lo, end, key=lambda p: data[4 * p : 4 * p + nb])
        return best, lo, hi

    def token_at(self, i: int, offset: int) -> int:
        """The token `offset` places into the suffix at array entry i (SEPARATOR past its sequence)."""
        return self._t[self._sa[i] + offset]

    def common_continuation(self, lo: int, hi: int, offset: int, limit: int) -> list[int]:
        """The tokens from `offset` on (at most `limit`) on which all suffixes in [lo, hi) agree
        (they are sorted, so the first and the last agreeing means all do), up to a sequence end."""
        a = self._sa[lo] + offset
        first = self.text[a : a + limit].tolist()
        last = first
        if hi - lo > 1:
            b = self._sa[hi - 1] + offset
            last = self.text[b : b + limit].tolist()
        n = 0
        for x, y in zip(first, last):
            if x != y or x == SEPARATOR:
                break
            n += 1
        return first[:n]

    def child_range(self, lo: int, hi: int, offset: int, token: int) -> tuple[int, int]:
        """Within [lo, hi) (suffixes that agree on their first `offset` tokens), the sub-range whose
        token at `offset` is `token`."""
        t = self._t

        def key(p: int) -> int:
            return t[p + offset]

        a = bisect.bisect_left(self._sa, token, lo, hi, key=key)
        return a, bisect.bisect_right(self._sa, token, a, hi, key=key)

    def children(
        self,
        lo: int,
        hi: int,
        offset: int,
        min_count: int = 1,
        *,
        vectorise_above: int = 256,
        scan_below: int = _SCAN_BELOW,
    ) -> list[tuple[int, int, int, int]]:
        """(token, lo, hi, live count) of each continuation at `offset` of the suffixes in [lo, hi)
        (which agree on their first `offset` tokens) with a live count of at least `min_count`,
        ascending by token. Sequence ends (SEPARATOR) are not continuations.

        A continuation with c >= min_count entries covers one of the entries lo, lo + s, lo + 2s, ...
        (s = min_count), so only those are probed; each probed token's run is found by bisection.
        Ranges needing more than `vectorise_above` probes are counted in one vectorised pass instead,
        and ranges of at most `scan_below` entries are read entry by entry."""
        min_count = max(1, int(min_count))
        if hi - lo <= 1:
            token = self._t[self._sa[lo] + offset] if hi > lo else SEPARATOR
            n = self.count(lo, hi) if token != SEPARATOR else 0
            return [(token, lo, hi, n)] if n >= min_count else []
        stride = min_count
        if (hi - lo) // stride > vectorise_above:
            return self._children_vectorised(lo, hi, offset, min_count)
        t, sa = self._t, self._sa
        if hi - lo <= scan_below:  # a short range: read every entry's token, group the runs
            keys = [t[sa[i] + offset] for i in range(lo, hi)]
            out, a = [], lo
            for i in range(lo + 1, hi + 1):
                if i == hi or keys[i - lo] != keys[a - lo]:
                    token = keys[a - lo]
                    if token == SEPARATOR:
                        break
                    n = self.count(a, i)
                    if n >= min_count:
                        out.append((token, a, i, n))
                    a = i
            return out

        def key(p: int) -> int:
            return t[p + offset]

        out = []
        last = t[sa[hi - 1] + offset]
        half = stride // 2
        p, run_end = lo, lo  # run_end: where the last run found ends (runs before it are done)
        while p < hi:
            token = t[sa[p] + offset]
            if token == SEPARATOR:
                break  # separators sort last
            if (
                half
                and p != run_end
                and not (
                    (p - half >= run_end and t[sa[p - half] + offset] == token)
                    or (p + half < hi and t[sa[p + half] + offset] == token)
                )
            ):
                # a run of >= s entries through p also holds p - s//2 or p + s//2: this one is shorter
                p += stride
                continue
            a = p if p == run_end else bisect.bisect_left(sa, token, run_end, p, key=key)
            b = hi if token == last else bisect.bisect_right(sa, token, p + 1, hi, key=key)
            n = self.count(a, b)
            if n >= min_count:
                out.append((token, a, b, n))
            run_end = b
            # the next probe: the first of lo, lo + s, ... at or after b (a run that starts at b with
            # >= s entries reaches it, and bisect_left from run_end finds where it starts)
            p = b if stride == 1 else lo + -(-(b - lo) // stride) * stride
        return out

    def _children_vectorised(self, lo: int, hi: int, offset: int, min_count: int) -> list[tuple[int, int, int, int]]:
        keys = self.text[self.sa[lo:hi].astype(np.int64) + offset]
        cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        begins = np.concatenate(([0], cut)) + lo
        ends = np.concatenate((cut, [hi - lo])) + lo
        tokens = keys[begins - lo]
        if self._live_prefix_np is None:
            counts = ends - begins
        else:
            counts = self._live_prefix_np[ends] - self._live_prefix_np[begins]
        keep = (tokens != SEPARATOR) & (counts >= min_count)
        return [
            (int(tok), int(a), int(b), int(c))
            for tok, a, b, c in zip(tokens[keep], begins[keep], ends[keep], counts[keep])
        ]

    def starts_in(self, lo: int, hi: int) -> np.ndarray:
        """Text positions of the live suffixes in [lo, hi)."""
        pos = self.sa[lo:hi].astype(np.int64)
        if self._live_prefix_np is not None:
            pos = pos[self.live[self.sequence_of(pos)]]
        return pos
