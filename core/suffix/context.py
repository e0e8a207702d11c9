"""The current request's text (prompt, then each committed token), searchable for the longest suffix
of itself that occurred earlier in it, and for where those earlier occurrences end.

Two parts, so a step never rebuilds anything large: a suffix array over a sealed prefix (the prompt
at first) and a short unsealed stretch after it, searched directly with numpy. When the unsealed
stretch grows past max(`seal_min`, a quarter of the sealed prefix), everything but the last token is
sealed again, so resealing costs O(log n) amortised per token.

Occurrences are reported by their *end* position; an occurrence's continuation is read from the whole
text, so one that runs from the sealed prefix into the newer tokens is continued correctly. The
sequence's own end (position n - 1) is the query, never an occurrence.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.suffix.array import SuffixArray, check_token_ids

_DIRECT_WINDOW = 16  # at most this many candidates: compare all remaining lengths in one pass


class ContextIndex:
    def __init__(self, tokens: Sequence[int] | np.ndarray = (), *, seal_min: int = 256):
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        check_token_ids(ids, "context token ids")
        self.seal_min = int(seal_min)
        self._buf = np.empty(max(64, 2 * len(ids)), dtype=np.int64)
        self._buf[: len(ids)] = ids
        self.n = len(ids)
        self._sealed: SuffixArray | None = None
        self._sealed_len = 0
        self._seal()

    @property
    def tokens(self) -> np.ndarray:
        """The text so far (a view: do not keep it across `extend`)."""
        return self._buf[: self.n]

    @property
    def sealed_len(self) -> int:
        return self._sealed_len

    def __len__(self) -> int:
        return self.n

    def _seal(self) -> None:
        upto = max(0, self.n - 1)  # the last token is the query's end: never sealed
        self._sealed = SuffixArray([self._buf[:upto]]) if upto else None
        self._sealed_len = upto

    def extend(self, tokens: Sequence[int] | np.ndarray) -> None:
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if not ids.size:
            return
        check_token_ids(ids, "committed token ids")
        need = self.n + len(ids)
        if need > len(self._buf):
            grown = np.empty(max(need, 2 * len(self._buf)), dtype=np.int64)
            grown[: self.n] = self._buf[: self.n]
            self._buf = grown
        self._buf[self.n : need] = ids
        self.n = need
        if self.n - 1 - self._sealed_len > max(self.seal_min, self._sealed_len // 4):
            self._seal()

    def tail_bytes(self, k: int) -> bytes:
        """The last k tokens as big-endian uint32 bytes (what SuffixArray searches take)."""
        return self._buf[max(0, self.n - k) : self.n].astype(">u4").tobytes()

    def longest_match(self, max_len: int, upper: int | None = None) -> tuple[int, np.ndarray]:
        """(k, ends): the longest k <= max_len such that the text's last k tokens also occur ending
        at some position e <= n - 2, and every such e (ascending). (0, empty) when the last token
        never occurred before. `upper`, when given, must be a known bound on k (it speeds up the
        sealed part's search)."""
        n = self.n
        limit = min(int(max_len), n - 1)
        if limit <= 0:
            return 0, np.zeros(0, dtype=np.int64)
        k_sealed, sealed_ends = 0, None
        if self._sealed is not None:
            bound = limit if upper is None else min(limit, int(upper))
            k_sealed, lo, hi = self._sealed.longest_match(self.tail_bytes(bound), bound)
            if k_sealed:
                sealed_ends = np.sort(self._sealed.starts_in(lo, hi)) + (k_sealed - 1)
        k_tail, tail_ends = self._tail_match(limit)
        k = max(k_sealed, k_tail)
        if k == 0:
            return 0, np.zeros(0, dtype=np.int64)
        parts = [e for kk, e in ((k_sealed, sealed_ends), (k_tail, tail_ends)) if kk == k and e is not None]
        return k, parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _tail_match(self, limit: int) -> tuple[int, np.ndarray | None]:
        """The same search over the ends in [sealed_len, n - 2], directly."""
        n, buf, first = self.n, self._buf, self._sealed_len
        if n - 1 <= first:
            return 0, None
        cand = np.flatnonzero(buf[first : n - 1] == buf[n - 1]) + first
        if not cand.size:
            return 0, None
        k = 1  # every candidate matches the last k tokens
        while k < limit:
            if cand.size <= _DIRECT_WINDOW:
                offsets = np.arange(k, limit)
                idx = cand[:, None] - offsets
                equal = (idx >= 0) & (buf[np.maximum(idx, 0)] == buf[n - 1 - offsets])
                run = np.cumprod(equal, axis=1).sum(axis=1)
                best = int(run.max())
                return k + best, cand[run == best]
            prev = cand - k
            ok = prev >= 0
            nxt = cand[ok & (buf[np.where(ok, prev, 0)] == buf[n - 1 - k])]
            if not nxt.size:
                break
            cand, k = nxt, k + 1
        return k, cand
