"""CSD's Online Correction Memory: how often the target corrected draft token x to token t.

Counts of (draft token, target token) pairs, one table per model pair (a fingerprint of both
models; for single-model CSD over context drafts, the target and the word "context"). The table is
built by calibration (plain SD over an unlabelled corpus, `rejections` of its traces; or teacher-forced:
the two models' argmax disagreements over corpus text), persisted as JSON under
`workbench_home()/memory/`, loaded at start and updated online by every CSD rejection.

Shipped memories: `core/memories/<pair fingerprint>.json.gz` holds a teacher-forced table for each
packaged model pair (built by `calibrate --mode forced --ship`). When the user has no table of their
own for a pair, `shared_memory` starts from the shipped one (`shipped_memory_path`); the shipped file is
never written: the first save writes the shipped counts plus the online updates to the user's home
copy, which from then on wins (as does any table the user calibrates).

Concurrency: one lock per table makes `observe` (read the count, then add one) atomic, so requests
sharing a table in one process see exact counts. Across processes, `save` merges: under a file
lock it re-reads the file, adds only the counts this process gathered since its last save and
writes the sum atomically (temporary file + os.replace), so two processes never lose each
other's updates.
"""

from __future__ import annotations

import atexit
import datetime as dt
import gzip
import hashlib
import json
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.errors import WorkbenchError
from core.persist import atomic_write, process_table, save_tables
from core.rules import KEY_ORDERS, KeyCounts, rescue_candidate

FORMAT = 1
CONTEXT_DRAFTS = "context"  # the draft side of the key for single-model CSD over context drafts


def pair_fingerprint(target_fingerprint: str, draft_fingerprint: str | None) -> str:
    """One id per (target, draft) pair; a missing draft means context drafts of the target alone."""
    text = f"{target_fingerprint}+{draft_fingerprint or CONTEXT_DRAFTS}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def memory_dir() -> Path:
    from core.models import workbench_home

    return workbench_home() / "memory"


def memory_path(fingerprint: str) -> Path:
    return memory_dir() / f"{fingerprint}.json"


SHIPPED_DIR = Path(__file__).resolve().parent / "memories"


def shipped_path(fingerprint: str) -> Path:
    """Where the package keeps the shipped table of a pair (whether or not there is one)."""
    return SHIPPED_DIR / f"{fingerprint}.json.gz"


def shipped_memory_path(fingerprint: str) -> Path | None:
    """The table shipped with the package for this pair, if there is one."""
    path = shipped_path(fingerprint)
    return path if path.exists() else None


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def calibrated_path(fingerprint: str) -> tuple[Path | None, str]:
    """The table a pair's CSD starts from and where it comes from: the user's own (home) table if there
    is one ("home"), else the shipped one ("shipped"), else (None, "none")."""
    home = memory_path(fingerprint)
    if home.exists():
        return home, "home"
    shipped = shipped_memory_path(fingerprint)
    return (shipped, "shipped") if shipped is not None else (None, "none")


class CorrectionMemory:
    """A thread-safe counter of (draft token, target token) pairs, optionally backed by a file.

    `counts` are what decisions read: the file's counts when loaded plus every observation since.
    `pending` are the observations not yet saved, which is what `save` adds to the file; counts
    given to the constructor are such observations (a table built in memory is saved whole).
    """

    def __init__(
        self,
        counts: Mapping[tuple[int, int], int] | None = None,
        *,
        path: str | Path | None = None,
        meta: Mapping[str, Any] | None = None,
        autosave_seconds: float | None = None,
    ):
        self._counts: Counter[tuple[int, int]] = Counter(
            {(int(d), int(t)): int(n) for (d, t), n in (counts or {}).items()}
        )
        self._pending: Counter[tuple[int, int]] = Counter(self._counts)
        self._lock = threading.Lock()
        self.path = Path(path) if path is not None else None
        self.meta: dict[str, Any] = dict(meta or {})
        self.autosave_seconds = autosave_seconds
        self._last_save = time.monotonic()
        # Counts read from a read-only seed (the shipped table) that `path` does not hold yet: the first
        # save writes them there with the observations, when the file does not exist.
        self._seed: Counter[tuple[int, int]] | None = None
        self._seed_meta: dict[str, Any] = {}
        # Counts under generalised keys (csd[keys=...]), derived from `_counts` on first use per key kind and
        # tokenizer and kept up to date by `observe`; never saved (the exact pairs are the table).
        self._derived: dict[tuple[str, str], _DerivedCounts] = {}

    # -- reading and updating -------------------------------------------------------------
    def count(self, draft: int, target: int) -> int:
        with self._lock:
            return self._counts.get((int(draft), int(target)), 0)

    def observe(self, draft: int, target: int) -> int:
        """Add one to the pair and return its count *before* the update (CSD reads, then updates)."""
        key = (int(draft), int(target))
        with self._lock:
            before = self._counts.get(key, 0)
            self._add(key)
        self._maybe_autosave()
        return before

    def _add(self, key: tuple[int, int]) -> None:
        """One observation of `key` (the caller holds the lock): the exact count and every derived key's."""
        self._counts[key] += 1
        self._pending[key] += 1
        for derived in self._derived.values():
            derived.add(key, 1)

    def _maybe_autosave(self) -> None:
        if (
            self.autosave_seconds is not None
            and self.path is not None
            and time.monotonic() - self._last_save >= self.autosave_seconds
        ):
            self.save()

    def observe_many(self, pairs: Iterable[tuple[int, int]]) -> int:
        n = 0
        for d, t in pairs:
            self.observe(d, t)
            n += 1
        return n

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)

    @property
    def total(self) -> int:
        """Observations behind the table (every rejection counted once)."""
        with self._lock:
            return sum(self._counts.values())

    @property
    def unseen_share(self) -> float | None:
        """Good–Turing estimate of the share of future rejections whose pair this table has never seen:
        pairs seen exactly once / observations. CSD cannot rescue those, at any λ; a long tail of
        disagreements keeps it high until the calibration corpus is large."""
        with self._lock:
            total = sum(self._counts.values())
            return sum(1 for c in self._counts.values() if c == 1) / total if total else None

    @property
    def unsaved(self) -> int:
        with self._lock:
            return sum(self._pending.values())

    def fingerprint(self) -> str:
        """16 hex digits of SHA-256 over the sorted counts: two memories with one fingerprint rescue alike."""
        items = sorted(self.snapshot().items())
        return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]

    def snapshot(self) -> dict[tuple[int, int], int]:
        with self._lock:
            return dict(self._counts)

    def most_common(self, n: int = 20) -> list[tuple[tuple[int, int], int]]:
        with self._lock:
            return self._counts.most_common(n)

    def key_counts(self, draft: int, target: int, keys: "PairKeys", observe: bool = False) -> KeyCounts:
        """The pair's counts under each of `keys`' kinds, in lookup order (exact first), read before the update;
        with `observe`, one observation of the pair (and so of every key it falls under) in the same locked step."""
        pair = (int(draft), int(target))
        with self._lock:
            counts = KeyCounts(
                (
                    ("exact", self._counts.get(pair, 0)),
                    *((kind, self._derived_counts(kind, keys).count(pair)) for kind in keys.kinds[1:]),
                )
            )
            if observe:
                self._add(pair)
        if observe:
            self._maybe_autosave()
        return counts

    def _derived_counts(self, kind: str, keys: "PairKeys") -> "_DerivedCounts":
        """The counts under one generalised kind, derived from the exact pairs on first use (the caller holds the lock)."""
        derived = self._derived.get((kind, keys.text_id))
        if derived is None:
            derived = self._derived[(kind, keys.text_id)] = _DerivedCounts(keys.key_of(kind))
            derived.rebuild(self._counts)
        return derived

    def key_fingerprint(self, keys: "PairKeys") -> str:
        """16 hex digits of SHA-256 over the counts of `keys`' generalised kinds as they stand: with `fingerprint`,
        what a run's key lookups start from (a run records it in its params as keys_sha)."""
        with self._lock:
            rows = sorted(
                (kind, *key, n)
                for kind in keys.kinds[1:]
                for key, n in self._derived_counts(kind, keys).counts.items()
                if n > 0
            )
        return hashlib.sha256(json.dumps([list(keys.kinds), rows]).encode()).hexdigest()[:16]

    def copy(self) -> "CorrectionMemory":
        """An in-memory copy with no file: for runs whose online updates must not reach the saved table
        (a benchmark, whose items must not leak into the memory a later run starts from). Saving the
        copy writes all its counts as new observations, so never save it over the original."""
        with self._lock:
            return CorrectionMemory(self._counts, meta=self.meta)

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str | Path | None = None) -> Path:
        """Merge the unsaved observations into the file and write it atomically; return its path."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise WorkbenchError("this correction memory has no file: pass a path to save()")
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            pending = Counter(self._pending)
            self._pending.clear()
        try:
            with _file_lock(path):
                if path.exists():
                    on_disk, meta = _read(path)
                else:
                    on_disk, meta = Counter(self._seed or {}), dict(self._seed_meta)
                merged = on_disk + pending
                meta = {**meta, **self.meta}
                _write(path, merged, meta)
        except BaseException:
            with self._lock:  # keep what could not be written for the next save
                self._pending.update(pending)
            raise
        with self._lock:
            # Adopt what other processes saved meanwhile, keeping observations made during the write.
            self._counts = merged + self._pending
            self._seed, self._seed_meta = None, {}
            for derived in self._derived.values():  # the adopted counts change every key's count
                derived.rebuild(self._counts)
        self._last_save = time.monotonic()
        if self.path is None:
            self.path = path
        return path

    @classmethod
    def load(cls, path: str | Path, **kwargs) -> "CorrectionMemory":
        path = Path(path)
        counts, meta = _read(path)
        mem = cls(counts, path=path, meta=meta, **kwargs)
        mem._pending.clear()  # already in the file
        return mem

    @classmethod
    def open(
        cls, path: str | Path, meta: Mapping[str, Any] | None = None, seed: str | Path | None = None, **kwargs
    ) -> "CorrectionMemory":
        """Load the table at `path` if there is one, else start from the table at `seed` (read only; the
        shipped memory), else empty; either way the table is written to `path` on the first save."""
        path = Path(path)
        if path.exists():
            mem = cls.load(path, **kwargs)
        elif seed is not None:
            counts, seed_meta = _read(Path(seed))
            mem = cls(counts, path=path, **kwargs)
            mem._pending.clear()  # the seed's counts are not observations of this process
            mem._seed = Counter(counts)
            mem._seed_meta = {**seed_meta, "seeded_from": {"file": Path(seed).name, "sha256": file_sha256(seed)}}
            mem.meta = dict(mem._seed_meta)
        else:
            mem = cls(path=path, **kwargs)
        for k, v in (meta or {}).items():
            mem.meta.setdefault(k, v)
        return mem


# -- generalised keys (csd[keys=exact|text|prefix|all]) ----------------------------------------
# A rejection (x, t*) is counted under its exact ids and, derived from the ids' texts, under coarser keys that
# generalise across tokenisations and spellings of one word. The lookup order is core.rules.KEY_ORDERS.
def normalised_text(text: str) -> str:
    """A token's text as a generalised key sees it: Unicode NFKC, case-folded, surrounding whitespace removed
    (' The', 'the' and 'THE' are one text). '' for whitespace alone or an incomplete UTF-8 piece (U+FFFD), which
    no generalised key covers: whitespace variants are indentation in code, and byte pieces are no text."""
    if "\ufffd" in text:
        return ""
    return unicodedata.normalize("NFKC", text).casefold().strip()


def ends_a_sentence_or_line(text: str) -> bool:
    """Whether a token's text ends a line (holds a newline) or a sentence ('.', '!', '?' last, spaces aside)."""
    return "\n" in text or text.rstrip().endswith((".", "!", "?"))


def same_boundary(draft_text: str, correction_text: str) -> bool:
    """Whether both tokens end a sentence or line, or neither does. A generalised key speaks only for such pairs:
    normalising strips the newline of '.\n', so without this '.\n'→' to' and '.'→'to' would count together and
    rescue a full stop where the target goes on; on GSM8K such rescues cut sentences short and cost answers (the
    exact pair, which the paper's CSD counts, is not affected)."""
    return ends_a_sentence_or_line(draft_text) == ends_a_sentence_or_line(correction_text)


def text_key(draft_text: str, correction_text: str) -> tuple[str, str] | None:
    """`text` key: the two tokens' normalised texts, so ' Solve'→' determine' and 'solve'→' Determine' are one key;
    None when one token ends a sentence or line and the other does not (`same_boundary`)."""
    d, t = normalised_text(draft_text), normalised_text(correction_text)
    return (d, t) if d and t and same_boundary(draft_text, correction_text) else None


def prefix_key(draft_text: str, correction_text: str) -> tuple[str, str] | None:
    """`prefix` key: one normalised text a proper prefix of the other (a tokenisation variant: ' ret' for ' return',
    or ' returns' for ' return'), keyed by the direction and the draft's text, so every longer or shorter
    correction of one draft token counts together; None when neither text is a prefix of the other, or when one
    token ends a sentence or line and the other does not (`same_boundary`)."""
    if not same_boundary(draft_text, correction_text):
        return None
    return prefix_relation(normalised_text(draft_text), normalised_text(correction_text))


def prefix_relation(d: str, t: str) -> tuple[str, str] | None:
    """The prefix key of two normalised texts, the boundary aside."""
    if not d or not t or d == t:
        return None
    if t.startswith(d):
        return ("draft shorter", d)
    if d.startswith(t):
        return ("draft longer", d)
    return None


KEY_FUNCTIONS: dict[str, Callable[[str, str], tuple[str, str] | None]] = {"text": text_key, "prefix": prefix_key}


class PairKeys:
    """The key kinds a run reads (core.rules.KEY_ORDERS[keys]) and the token texts they are derived from.

    `text_of(id)` is a token's text (the target's tokenizer); `text_id` names that tokenizer (the target's
    fingerprint), so the derived counts are cached per tokenizer on the memory. Texts are cached here."""

    def __init__(self, kinds: tuple[str, ...], text_of: Callable[[int], str], text_id: str):
        unknown = [k for k in kinds[1:] if k not in KEY_FUNCTIONS]
        if not kinds or kinds[0] != "exact" or unknown:
            raise ValueError(f"key kinds start with 'exact' and name {sorted(KEY_FUNCTIONS)}, got {kinds}")
        self.kinds, self.text_of, self.text_id = tuple(kinds), text_of, text_id
        self._texts: dict[int, str] = {}

    @classmethod
    def of(cls, keys: int, tokenizer, text_id: str) -> "PairKeys":
        """The kinds of `csd[keys=...]` (its number) over a Hugging Face tokenizer's single-token texts."""
        return cls(KEY_ORDERS[int(keys)], lambda i: tokenizer.decode([int(i)]), text_id)

    def text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.text_of(token)
        return text

    def key_of(self, kind: str) -> Callable[[tuple[int, int]], tuple[str, str] | None]:
        key = KEY_FUNCTIONS[kind]
        return lambda pair: key(self.text(pair[0]), self.text(pair[1]))


class _DerivedCounts:
    """One generalised key kind's counts: the sum of the exact counts of the pairs under each key."""

    def __init__(self, key_of: Callable[[tuple[int, int]], tuple[str, str] | None]):
        self.key_of = key_of
        self.counts: Counter[tuple[str, str]] = Counter()

    def rebuild(self, exact: Mapping[tuple[int, int], int]) -> None:
        self.counts = Counter()
        for pair, n in exact.items():
            self.add(pair, n)

    def add(self, pair: tuple[int, int], n: int) -> None:
        key = self.key_of(pair)
        if key is not None:
            self.counts[key] += n

    def count(self, pair: tuple[int, int]) -> int:
        key = self.key_of(pair)
        return self.counts.get(key, 0) if key is not None else 0


class KeyedMemory:
    """A correction memory read under generalised keys: what a `csd[keys=text|prefix|all]` run verifies with.

    `count`/`observe` answer like CorrectionMemory's, with the counts of every key kind (core.rules.KeyCounts)
    instead of the exact count; the rescue rule reads them most specific first. Updates go to the memory."""

    def __init__(self, memory: CorrectionMemory, keys: PairKeys):
        self.memory, self.keys = memory, keys

    def count(self, draft: int, target: int) -> KeyCounts:
        return self.memory.key_counts(draft, target, self.keys)

    def observe(self, draft: int, target: int) -> KeyCounts:
        return self.memory.key_counts(draft, target, self.keys, observe=True)


def keyed_memory(memory: CorrectionMemory, keys: int, target) -> KeyedMemory:
    """`memory` read under `csd[keys=...]`'s kinds, over the target's token texts (core.models.LoadedModel)."""
    return KeyedMemory(memory, PairKeys.of(keys, target.tokenizer, target.fingerprint))


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `<path>.lock` (POSIX); elsewhere only the atomic replace protects the file."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path.with_suffix(path.suffix + ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


MEMORY_BYTES = 256 << 20  # the shipped table is 30 KB; a large calibration a few MB


def _read(path: Path) -> tuple[Counter, dict[str, Any]]:
    from core.files import read_bytes

    try:
        raw = read_bytes(path, what="the correction memory", max_bytes=MEMORY_BYTES, gunzip=path.suffix == ".gz")
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError, WorkbenchError) as e:  # JSONDecodeError is a ValueError
        raise WorkbenchError(
            f"could not read the correction memory {path}: {str(e)[:300]}. Delete it or run `calibrate` again."
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("pairs"), list):
        raise WorkbenchError(
            f"{path} is not a correction memory of format {FORMAT}; delete it or run `calibrate` again"
        )
    counts: Counter = Counter()
    try:
        for row in data["pairs"]:
            d, t, n = (int(v) for v in row)
            counts[(d, t)] += n
    except (TypeError, ValueError):
        raise WorkbenchError(
            f"{path}: a pair is not three integers (draft token, target token, count); delete it or run "
            f"`calibrate` again"
        ) from None
    return counts, dict(data.get("meta") or {})


def _write(path: Path, counts: Mapping[tuple[int, int], int], meta: Mapping[str, Any]) -> None:
    # Most frequent first, so the file itself shows the head of the long tail.
    pairs = sorted(((d, t, n) for (d, t), n in counts.items() if n > 0), key=lambda r: (-r[2], r[0], r[1]))
    data = {
        "format": FORMAT,
        "meta": {**meta, "saved": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
        "observations": sum(r[2] for r in pairs),
        "pairs": pairs,
    }
    text = json.dumps(data, separators=(",", ":")).encode("utf-8")

    def write(fh) -> None:
        if path.suffix == ".gz":  # mtime 0 and no file name: the same table gives the same bytes
            with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
                gz.write(text)
        else:
            fh.write(text)

    atomic_write(path, write)


# -- one shared table per model pair in this process ----------------------------------------
_SHARED: dict[Path, CorrectionMemory] = {}
AUTOSAVE_SECONDS = 60.0


def shared_memory(target, draft=None) -> CorrectionMemory:
    """The process-wide table of a model pair (core.models.LoadedModel objects; `draft` None for
    context drafts): loaded on first use from the user's home copy, or, when there is none, from the
    table shipped with the package (`shipped_memory_path`), and saved (to the home copy, never the
    shipped file) every minute while updated and at exit."""
    fingerprint = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
    path = memory_path(fingerprint)
    meta = {
        "pair": fingerprint,
        "target": target.name,
        "target_fingerprint": target.fingerprint,
        "draft": draft.name if draft is not None else CONTEXT_DRAFTS,
        "draft_fingerprint": draft.fingerprint if draft is not None else None,
    }
    return process_table(
        _SHARED,
        path,
        lambda: CorrectionMemory.open(
            path, meta=meta, seed=shipped_memory_path(fingerprint), autosave_seconds=AUTOSAVE_SECONDS
        ),
    )


_SHIPPED: dict[str, CorrectionMemory] = {}
_SHIPPED_LOCK = threading.Lock()


def shipped_memory(target, draft=None) -> CorrectionMemory:
    """The table shipped with the package for a model pair, read only and never saved (no file): what
    `memory_mode=shipped` reads, so a run's rescues do not depend on what online runs added since. Empty for a
    pair the package ships no table for."""
    fingerprint = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
    with _SHIPPED_LOCK:
        mem = _SHIPPED.get(fingerprint)
        if mem is None:
            path = shipped_memory_path(fingerprint)
            counts, meta = _read(path) if path is not None else ({}, {})
            mem = _SHIPPED[fingerprint] = CorrectionMemory(counts, meta=meta)
            mem._pending.clear()  # nothing to save: the package's file is the table
        return mem


@atexit.register
def _save_shared() -> None:
    save_tables(_SHARED.values(), lambda mem: mem.unsaved > 0, "correction memory")


# -- calibration from traces --------------------------------------------------------------
def rejections(steps) -> list[tuple[int, int]]:
    """The (draft token, correction token) pairs of a lossless run's steps (core.trace.StepTrace).

    A step rejected something when its last accepted node has rejected children: the correction is
    the target's own token there (the bonus), and the draft token is the rejected child the target
    found most probable (for a chain, the one child). This is the pair a CSD verifier would look up
    at that rejection, so counting it over plain SD runs is the paper's calibration.
    """
    pairs = []
    for step in steps:
        bonus = next((n for n in step.nodes if n.decision == "bonus"), None)
        if bonus is None:
            continue
        rejected = {
            n.node: n
            for n in step.nodes
            if n.parent == bonus.parent and n.decision == "rejected" and n.node != bonus.node
        }
        if not rejected:
            continue
        best = rescue_candidate(list(rejected), lambda i: rejected[i].p if rejected[i].p is not None else -1.0)
        pairs.append((rejected[best].token_id, bonus.token_id))
    return pairs


def rescues(steps) -> list[tuple[int, int, int, int | None, float | None]]:
    """Where a run accepted a token the target would not have chosen: (output position, draft token,
    the target's correction, memory count read, logit gap) of every rescued node, in order."""
    out, emitted = [], 0
    for step in steps:
        for n in step.nodes:
            if n.decision == "rescued":
                out.append((emitted + n.depth - 1, n.token_id, n.correction_id, n.mem_count, n.logit_gap))
        emitted += len(step.emitted)
    return out
