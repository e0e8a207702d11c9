"""The draft pool: an index from every n-gram of length 1..key_len in a token sequence to where it
occurs, for retrieving continuations of the current suffix (PLD, CASD, AASD).

The initial context is indexed in bulk with numpy (a 64-bit polynomial hash per k-gram, sorted once,
binary-searched per lookup); tokens committed later go into small per-k dictionaries, so a step never
rescans the sequence. Hash hits are checked against the actual tokens, so collisions cannot leak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.types import Source

_MULT = 0x9E3779B97F4A7C15  # odd 64-bit multiplier (golden ratio)
_MASK = (1 << 64) - 1
MAX_ID = 2**31


@dataclass
class Hit:
    position: int  # index in the pool sequence of the first continuation token
    tokens: np.ndarray  # int64, length 1..ngram (shorter near the end of the pool)
    sources: list[Source]  # per token: "context" or "generated"


def _hashes(tokens: np.ndarray, k: int) -> np.ndarray:
    """Hash of every k-gram (uint64 arithmetic wraps, which is what we want)."""
    n = len(tokens) - k + 1
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            h = h * np.uint64(_MULT) + (tokens[j : j + n].astype(np.uint64) + np.uint64(1))
    return h


def _hash_key(key: Sequence[int]) -> int:
    h = 0
    for t in key:
        h = (h * _MULT + int(t) + 1) & _MASK
    return h


def _check_ids(ids: np.ndarray) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= MAX_ID):
        raise ValueError(f"token ids must lie in [0, 2**31); got {int(ids.min())}..{int(ids.max())}")


class DraftPool:
    def __init__(self, context_ids: Sequence[int] | np.ndarray, key_len: int = 6, ngram: int = 6):
        if not isinstance(key_len, (int, np.integer)) or key_len < 1:
            raise ValueError(f"key_len must be an integer >= 1 (got {key_len!r})")
        if not isinstance(ngram, (int, np.integer)) or ngram < 1:
            raise ValueError(f"ngram must be an integer >= 1 (got {ngram!r})")
        self.key_len, self.ngram = int(key_len), int(ngram)
        self.base = np.asarray(context_ids, dtype=np.int64).reshape(-1)
        _check_ids(self.base)
        self._context_len = len(self.base)
        self.ext: list[int] = []
        self.sorted_hashes: dict[int, np.ndarray] = {}
        self.sorted_starts: dict[int, np.ndarray] = {}
        for k in range(1, self.key_len + 1):
            if len(self.base) >= k:
                h = _hashes(self.base, k)
                order = np.argsort(h, kind="stable")
                self.sorted_hashes[k], self.sorted_starts[k] = h[order], order.astype(np.int64)
        # k-grams that end in the extension: key tuple -> ascending start positions
        self.new_grams: dict[int, dict[tuple[int, ...], list[int]]] = {k: {} for k in range(1, self.key_len + 1)}

    def __len__(self) -> int:
        return len(self.base) + len(self.ext)

    @property
    def context_len(self) -> int:
        return self._context_len

    def _tokens(self, start: int, stop: int) -> list[int]:
        n0 = len(self.base)
        out = self.base[start : min(stop, n0)].tolist() if start < n0 else []
        if stop > n0:
            out += self.ext[max(start - n0, 0) : stop - n0]
        return out

    def extend(self, token_ids: Sequence[int]) -> None:
        """Append committed tokens; index only the k-grams that end in them."""
        ids = [int(t) for t in token_ids]
        _check_ids(np.asarray(ids, dtype=np.int64))
        for t in ids:
            self.ext.append(t)
            end = len(self)  # exclusive end of the k-grams ending at the new token
            for k in range(1, self.key_len + 1):
                start = end - k
                if start < 0:
                    break
                key = tuple(self._tokens(start, end))
                self.new_grams[k].setdefault(key, []).append(start)

    def _base_starts(self, key: Sequence[int], want: int, earliest: bool) -> list[int]:
        k = len(key)
        hashes = self.sorted_hashes.get(k)
        if hashes is None:
            return []
        h = np.uint64(_hash_key(key))
        lo, hi = int(np.searchsorted(hashes, h, "left")), int(np.searchsorted(hashes, h, "right"))
        starts = self.sorted_starts[k][lo:hi]
        if not earliest:
            starts = starts[::-1]
        key_arr = np.asarray(key, dtype=np.int64)
        out: list[int] = []
        window = max(2 * want + 2, 8)
        for w in range(0, len(starts), window):  # usually one window; more only after collisions
            chunk = starts[w : w + window]
            grams = self.base[chunk[:, None] + np.arange(k)]
            out += chunk[(grams == key_arr).all(axis=1)].tolist()
            if len(out) >= want:
                break
        return out

    def lookup(self, suffix: Sequence[int], max_hits: int = 64, order: str = "recent") -> tuple[int, list[Hit]]:
        """Continuations of the longest key (last k tokens of `suffix`, k = key_len..1) that occurs
        with a non-empty continuation; returns (k, hits), or (0, []) when nothing matches."""
        if max_hits < 1:
            raise ValueError(f"max_hits must be >= 1 (got {max_hits})")
        if order not in ("recent", "earliest"):
            raise ValueError(f"order must be 'recent' or 'earliest' (got {order!r})")
        total = len(self)
        suffix = [int(t) for t in suffix[-self.key_len :]]
        earliest = order == "earliest"
        for k in range(min(self.key_len, len(suffix)), 0, -1):
            key = suffix[-k:]
            # +1: the occurrence at the very end of the pool has no continuation and is dropped below
            base = self._base_starts(key, max_hits + 1, earliest)
            new = self.new_grams[k].get(tuple(key), [])
            starts = base + new if earliest else new[::-1] + base
            starts = [s for s in starts if s + k < total][:max_hits]
            if starts:
                return k, [self._hit(s + k) for s in starts]
        return 0, []

    def _hit(self, position: int) -> Hit:
        stop = min(position + self.ngram, len(self))
        tokens = np.asarray(self._tokens(position, stop), dtype=np.int64)
        sources: list[Source] = ["context" if p < self._context_len else "generated" for p in range(position, stop)]
        return Hit(position, tokens, sources)
