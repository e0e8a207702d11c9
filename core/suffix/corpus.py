"""The corpus of previous outputs for one model: requests (token sequences) under keys, bounded in
tokens, least recently used evicted first, searchable through suffix arrays.

State, all of it explicit:
- `frozen` (nothing is added or evicted: a rerun drafts exactly alike) or online (`add` takes each
  finished request's output);
- size: requests and tokens; a corpus with no requests is cold;
- `content_hash()`: 16 hex digits over the multiset of its sequences. Drafts depend only on that
  multiset (never on keys, order or storage), so equal hashes draft alike.

Storage: a `sealed` suffix array over most requests and a small `fresh` one over those added since,
rebuilt on each add; when the fresh part outgrows max(FRESH_MIN, sealed / 16) both are merged into one
sealed array, so adding costs O(log n) rebuilds per token amortised. Evicting marks a request's
suffixes dead without rebuilding (core.suffix.array.SuffixArray.without); the sealed array is rebuilt once a
quarter of it is dead.

Files (`save` / `load`): a magic line, the format version, a JSON header (keys in LRU order, lengths,
bound, fingerprint, mode, content hash), the tokens as little-endian int32, and a SHA-256 of all of it.
A file that fails any check is refused with CorruptCorpusError (rebuild the corpus from the trace
store); one holding more tokens than the bound it is loaded under keeps its most recent requests and
says so (`notices`, and a warning).
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import InvalidInputError, WorkbenchError
from core.persist import atomic_write
from core.suffix.array import SuffixArray, check_token_ids

FORMAT = 1
MAGIC = b"spec-workbench suffix corpus\n"
DEFAULT_MAX_TOKENS = 1_000_000
FRESH_MIN = 4096  # tokens the fresh array may hold before a merge, at least
Key = str | int


class CorruptCorpusError(WorkbenchError):
    """A stored corpus file that cannot be trusted; rebuild the corpus from the trace store."""


class FrozenCorpusError(WorkbenchError):
    """A change asked of a frozen corpus."""


def _digest(tokens: np.ndarray) -> bytes:
    return hashlib.blake2b(tokens.astype("<i4").tobytes(), digest_size=16).digest()


def corpus_path(fingerprint: str) -> Path:
    """Where the corpus of a model fingerprint is kept: <workbench home>/suffix/<fingerprint>.corpus."""
    from core.models import workbench_home

    return workbench_home() / "suffix" / f"{fingerprint}.corpus"


class SuffixCorpus:
    """`requests`: (key, tokens) pairs from least to most recently used; when they hold more than
    `max_tokens` tokens, the least recent are dropped and `notices` says so."""

    def __init__(
        self,
        requests: Iterable[tuple[Key, Sequence[int] | np.ndarray]] = (),
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        fingerprint: str | None = None,
        frozen: bool = False,
        _source: str = "the requests given",
    ):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
            raise InvalidInputError(f"the corpus bound must be a whole number of tokens >= 1 (got {max_tokens!r})")
        self.max_tokens = int(max_tokens)
        self.fingerprint = fingerprint
        self.frozen = bool(frozen)
        self.notices: list[str] = []
        self.version = 0  # changes whenever the content does
        self._lock = threading.RLock()
        self._requests: OrderedDict[Key, np.ndarray] = OrderedDict()
        self._digests: dict[Key, bytes] = {}
        self._tokens = 0
        self._hash: str | None = None
        self._sealed: SuffixArray | None = None
        self._sealed_keys: list[Key] = []
        self._fresh: SuffixArray | None = None
        self._fresh_keys: list[Key] = []
        self._where: dict[Key, tuple[str, int]] = {}
        self._next_key = 0
        self.fresh_min = FRESH_MIN
        for key, tokens in requests:
            self._put(key, tokens)
        self._fit(_source)
        self._rebuild_all()

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._requests)

    @property
    def tokens(self) -> int:
        return self._tokens

    @property
    def cold(self) -> bool:
        return not self._requests

    @property
    def mode(self) -> str:
        return "frozen" if self.frozen else "online"

    def keys(self) -> list[Key]:
        """Request keys from least to most recently used."""
        with self._lock:
            return list(self._requests)

    def sequence(self, key: Key) -> np.ndarray:
        return self._requests[key].copy()

    def arrays(self) -> tuple[SuffixArray, ...]:
        """The suffix arrays a lookup searches (a snapshot: later changes build new ones)."""
        with self._lock:
            return tuple(a for a in (self._sealed, self._fresh) if a is not None)

    def content_hash(self) -> str:
        with self._lock:
            if self._hash is None:
                self._hash = hashlib.sha256(b"".join(sorted(self._digests.values()))).hexdigest()[:16]
            return self._hash

    def state(self) -> dict[str, Any]:
        """What a run records about the corpus it drafted from."""
        return {
            "mode": self.mode,
            "requests": len(self),
            "tokens": self.tokens,
            "max_tokens": self.max_tokens,
            "hash": self.content_hash(),
            "fingerprint": self.fingerprint,
        }

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays: the requests' tokens and the suffix arrays."""
        with self._lock:
            return sum(t.nbytes for t in self._requests.values()) + sum(a.nbytes for a in self.arrays())

    # -- changing ------------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self.frozen:
            raise FrozenCorpusError(f"the corpus is frozen, so it cannot {what}; use an online corpus (frozen=False)")

    def _new_key(self) -> str:
        while f"local-{self._next_key}" in self._requests:
            self._next_key += 1
        self._next_key += 1
        return f"local-{self._next_key - 1}"

    def _put(self, key: Key, tokens) -> None:
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise InvalidInputError(f"a corpus key must be a string or an integer (got {key!r})")
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        check_token_ids(ids, "corpus token ids")
        if len(ids) > self.max_tokens:
            self.notices.append(
                f"request {key!r} has {len(ids)} tokens, more than the corpus bound "
                f"{self.max_tokens}: kept its first {self.max_tokens}"
            )
            warnings.warn(self.notices[-1], stacklevel=3)
            ids = ids[: self.max_tokens]
        if key in self._requests:
            self._remove(key)
        arr = ids.astype(np.int32)
        self._requests[key] = arr
        self._digests[key] = _digest(arr)
        self._tokens += len(arr)
        self._hash = None
        self.version += 1

    def _remove(self, key: Key) -> None:
        arr = self._requests.pop(key)
        del self._digests[key]
        self._tokens -= len(arr)
        self._hash = None
        self.version += 1
        where = self._where.pop(key, None)
        if where is not None:
            part, index = where
            if part == "sealed":
                assert self._sealed is not None  # _where names only parts that exist
                self._sealed = self._sealed.without([index])
            else:
                assert self._fresh is not None
                self._fresh = self._fresh.without([index])

    def _fit(self, what: str) -> list[Key]:
        """Drop least recently used requests until the bound holds (the most recent always stays)."""
        dropped: list[Key] = []
        while self._tokens > self.max_tokens and len(self._requests) > 1:
            key = next(iter(self._requests))
            dropped.append(key)
            self._remove(key)
        if dropped and what:
            self.notices.append(
                f"{what} held more than the corpus bound of {self.max_tokens} tokens: dropped the "
                f"{len(dropped)} least recently used requests, kept {len(self)} ({self._tokens} tokens)"
            )
            warnings.warn(self.notices[-1], stacklevel=3)
        return dropped

    def add(self, tokens: Sequence[int] | np.ndarray, key: Key | None = None, *, dedupe: bool = False) -> Key:
        """Add a finished request's output as the most recently used request (replacing one under the
        same key), evicting least recently used requests past the bound. Returns its key. With
        `dedupe`, an output the corpus already holds is only marked used (its existing key returned):
        the same output reported twice (by the run and by the store) must not count twice."""
        with self._lock:
            self._check_open("add a request")
            if dedupe:
                digest = _digest(np.asarray(tokens, dtype=np.int64).reshape(-1).astype(np.int32))
                held = next((k for k, d in self._digests.items() if d == digest), None)
                if held is not None:
                    self._requests.move_to_end(held)
                    return held
            key = self._new_key() if key is None else key
            self._put(key, tokens)
            self._fit("")
            self._place_new(key)
            return key

    def evict(self, key: Key) -> None:
        with self._lock:
            self._check_open("evict a request")
            if key not in self._requests:
                raise KeyError(f"no request {key!r} in the corpus")
            self._remove(key)
            self._maybe_compact()

    def touch(self, key: Key) -> None:
        """Mark a request used now, so it is evicted last (a frozen corpus keeps its order)."""
        with self._lock:
            if not self.frozen and key in self._requests:
                self._requests.move_to_end(key)

    # -- the suffix arrays -----------------------------------------------------------------------
    def _build(self, keys: list[Key], part: str) -> SuffixArray | None:
        for i, key in enumerate(keys):
            self._where[key] = (part, i)
        return SuffixArray([self._requests[k] for k in keys]) if keys else None

    def _rebuild_all(self) -> None:
        self._where.clear()
        self._sealed_keys = list(self._requests)
        self._sealed = self._build(self._sealed_keys, "sealed")
        self._fresh_keys, self._fresh = [], None

    def _live(self, keys: list[Key], part: str) -> list[Key]:
        return [k for k in keys if self._where.get(k) is not None and self._where[k][0] == part]

    def _place_new(self, key: Key) -> None:
        sealed_live = self._live(self._sealed_keys, "sealed")
        fresh_keys = [k for k in self._live(self._fresh_keys, "fresh") if k != key] + [key]
        fresh_tokens = sum(len(self._requests[k]) for k in fresh_keys)
        sealed_tokens = sum(len(self._requests[k]) for k in sealed_live)
        if fresh_tokens > max(self.fresh_min, sealed_tokens // 16) or self._sealed is None:
            self._rebuild_all()
            return
        for k in self._fresh_keys:
            if self._where.get(k, ("",))[0] == "fresh":
                del self._where[k]
        self._fresh_keys = fresh_keys
        self._fresh = self._build(fresh_keys, "fresh")
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        sealed = self._sealed
        if sealed is not None and (len(sealed) - sealed.live_tokens - int(sealed.live.sum())) * 4 > len(sealed):
            self._rebuild_all()

    # -- files -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the corpus atomically (temporary file, then rename)."""
        path = Path(path)
        with self._lock:
            keys = list(self._requests)
            lengths = [int(len(self._requests[k])) for k in keys]
            header = {
                "format": FORMAT,
                "fingerprint": self.fingerprint,
                "max_tokens": self.max_tokens,
                "mode": self.mode,
                "keys": keys,
                "lengths": lengths,
                "tokens": self._tokens,
                "content_hash": self.content_hash(),
            }
            body = b"".join(self._requests[k].astype("<i4").tobytes() for k in keys)
        head = json.dumps(header, separators=(",", ":")).encode("utf-8")
        payload = MAGIC + struct.pack("<IQ", FORMAT, len(head)) + head + body
        path.parent.mkdir(parents=True, exist_ok=True)

        def write(fh) -> None:
            fh.write(payload + hashlib.sha256(payload).digest())

        atomic_write(path, write)
        return path

    @classmethod
    def load(cls, path: str | Path, *, max_tokens: int | None = None, frozen: bool | None = None) -> "SuffixCorpus":
        """Read a corpus file; `max_tokens` / `frozen` override the stored bound and mode."""
        path = Path(path)
        header, body = _read_file(path)
        tokens = np.frombuffer(body, dtype="<i4")
        offsets = np.concatenate(([0], np.cumsum(header["lengths"], dtype=np.int64)))
        sequences = [tokens[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        found = hashlib.sha256(b"".join(sorted(_digest(s) for s in sequences))).hexdigest()[:16]
        if found != header["content_hash"]:
            raise CorruptCorpusError(
                f"the suffix corpus {path} does not hold what its header says (content hash "
                f"{found}, header {header['content_hash']}); delete it and rebuild the corpus "
                f"from the trace store"
            )
        if tokens.size and (int(tokens.min()) < 0):
            raise CorruptCorpusError(
                f"the suffix corpus {path} holds negative token ids; delete it and rebuild the "
                f"corpus from the trace store"
            )
        return cls(
            zip(header["keys"], sequences),
            max_tokens=header["max_tokens"] if max_tokens is None else max_tokens,
            fingerprint=header.get("fingerprint"),
            frozen=(header.get("mode") == "frozen") if frozen is None else frozen,
            _source=f"the corpus file {path}",
        )


_SHARED: dict[str, SuffixCorpus] = {}
_SHARED_LOCK = threading.Lock()


def shared_corpus(fingerprint: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> SuffixCorpus:
    """The process-wide online corpus of a model fingerprint (empty until something adds to it or a
    caller installs one, as the workbench does with the corpus it builds from the trace store)."""
    with _SHARED_LOCK:
        corpus = _SHARED.get(fingerprint)
        if corpus is None:
            corpus = _SHARED[fingerprint] = SuffixCorpus(max_tokens=max_tokens, fingerprint=fingerprint)
        return corpus


def install_shared(corpus: SuffixCorpus) -> SuffixCorpus:
    """Make `corpus` the process-wide corpus of its fingerprint (replacing any earlier one)."""
    if not corpus.fingerprint:
        raise InvalidInputError("a shared suffix corpus needs the model fingerprint it belongs to")
    with _SHARED_LOCK:
        _SHARED[corpus.fingerprint] = corpus
    return corpus


def _read_file(path: Path) -> tuple[dict[str, Any], bytes]:
    def corrupt(why: str) -> CorruptCorpusError:
        return CorruptCorpusError(
            f"the suffix corpus {path} cannot be used: {why}; delete it and rebuild the corpus from the trace store"
        )

    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CorruptCorpusError(f"cannot read the suffix corpus {path}: {e.strerror or type(e).__name__}") from None
    fixed = len(MAGIC) + struct.calcsize("<IQ")
    if not raw.startswith(MAGIC):
        raise corrupt("it is not a suffix corpus file (wrong magic)")
    if len(raw) < fixed + 32:
        raise corrupt("it is truncated")
    version, head_len = struct.unpack("<IQ", raw[len(MAGIC) : fixed])
    if version != FORMAT:
        raise corrupt(f"it has format {version}, this version reads format {FORMAT}")
    payload, checksum = raw[:-32], raw[-32:]
    if hashlib.sha256(payload).digest() != checksum:
        raise corrupt("its checksum does not match (damaged or truncated)")
    try:
        header = json.loads(payload[fixed : fixed + head_len].decode("utf-8"))
        body = payload[fixed + head_len :]
        lengths, keys = header["lengths"], header["keys"]
        if (
            not isinstance(lengths, list)
            or not isinstance(keys, list)
            or len(lengths) != len(keys)
            or any(not isinstance(n, int) or n < 0 for n in lengths)
            or sum(lengths) * 4 != len(body)
            or not isinstance(header["content_hash"], str)
        ):
            raise ValueError("header and body disagree")
        if (
            isinstance(header["max_tokens"], bool)
            or not isinstance(header["max_tokens"], int)
            or header["max_tokens"] < 1
        ):
            raise ValueError(f"bound {header['max_tokens']!r}")
        if header.get("mode") not in ("frozen", "online") or not isinstance(
            header.get("fingerprint"), (str, type(None))
        ):
            raise ValueError("mode or fingerprint")
        if any(isinstance(k, bool) or not isinstance(k, (str, int)) for k in keys):
            raise ValueError("a key is neither a string nor an integer")
        if len(set(map(json.dumps, keys))) != len(keys):
            raise ValueError("repeated keys")
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise corrupt(f"its header is invalid ({e})") from None
    return header, body
