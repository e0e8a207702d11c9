"""The suffix corpus from the trace store: the output token ids of the stored complete runs of one
model fingerprint, newest first, up to a token bound (core.suffix.SuffixCorpus).

One query over the `runs` table reads only the id and the output ids, newest first, in batches, and
stops as soon as the bound is reached. Runs that repeat an output already taken are skipped by
default: the store holds the same item under many methods (every lossless method reproduces greedy's
output), and counting each copy would weigh a continuation by how many methods were benchmarked.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from pathlib import Path

import numpy as np
from sqlalchemy import exc as sa_exc
from sqlalchemy import make_url, select
from sqlalchemy.orm import Session

from core.errors import InvalidInputError
from core.suffix import DEFAULT_MAX_TOKENS, SuffixCorpus
from workbench.store.repository import Store
from workbench.store.schema import Run

BATCH = 2000  # rows fetched at a time
_IN_MEMORY: "weakref.WeakKeyDictionary[Store, str]" = weakref.WeakKeyDictionary()  # each in-memory store is its own


def store_id(store: Store) -> str:
    """A short id of the database a store reads (16 hex digits): equal for two Store objects of the same database
    (an SQLite file by its resolved path, a server database by its URL without the password), different for two
    databases, and unique to the object for an in-memory SQLite store. Run ids are only unique within one
    database, so a corpus keys a stored output by this id and the run id together (`run_key`)."""
    url = make_url(store.url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            where = f"sqlite:{Path(url.database).expanduser().resolve()}"
        else:
            where = f"memory:{_IN_MEMORY.setdefault(store, uuid.uuid4().hex)}"
    else:
        where = url.set(password=None).render_as_string(hide_password=False)
    return hashlib.blake2b(where.encode(), digest_size=8).hexdigest()


def run_key(store: Store, run_id: int) -> str:
    """The corpus key of a stored run's output: `<store id>:<run id>` (run ids collide across databases)."""
    return f"{store_id(store)}:{int(run_id)}"


def run_id_of(key, store: Store) -> int | None:
    """The run id of a corpus key made by `run_key` for this store; None for any other key (another store's
    runs, `local-N` requests added online)."""
    prefix = f"{store_id(store)}:"
    if isinstance(key, str) and key.startswith(prefix) and key[len(prefix) :].isdigit():
        return int(key[len(prefix) :])
    return None


def stored_outputs(
    store: Store,
    fingerprint: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    dedupe: bool = True,
    before_run: int | None = None,
    after_run: int | None = None,
) -> list[tuple[int, list[int]]]:
    """(run id, output ids) of the complete runs of `fingerprint`, newest first, while their tokens
    fit in `max_tokens` (the first run that does not fit ends the list). `before_run` keeps only
    runs with a smaller id (a corpus that predates a run), `after_run` only runs with a larger one
    (what a saved corpus has not seen); empty outputs are skipped."""
    if not fingerprint:
        raise InvalidInputError(
            "a model fingerprint is needed to load a suffix corpus (the loaded model's fingerprint)"
        )
    q = (
        select(Run.id, Run.output_ids)
        .where(Run.model_fingerprint == fingerprint, Run.status == "complete")
        .order_by(Run.id.desc())
    )
    if before_run is not None:
        q = q.where(Run.id < int(before_run))
    if after_run is not None:
        q = q.where(Run.id > int(after_run))
    out: list[tuple[int, list[int]]] = []
    seen: set[bytes] = set()
    total = 0
    try:
        with Session(store.engine) as s:
            for part in s.execute(q.execution_options(yield_per=BATCH)).partitions():
                for run_id, ids in part:
                    if not ids:
                        continue
                    if dedupe:
                        digest = hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()
                        if digest in seen:
                            continue
                        seen.add(digest)
                    if total + len(ids) > max_tokens:
                        return out
                    out.append((run_id, ids))
                    total += len(ids)
    except sa_exc.DBAPIError as e:
        raise store._explain(e) from e
    return out


def load_corpus(
    store: Store,
    fingerprint: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    frozen: bool = True,
    dedupe: bool = True,
    before_run: int | None = None,
) -> SuffixCorpus:
    """The corpus of `fingerprint` built from the store (keys: `run_key(store, run id)`; the newest run is the most
    recently used). Frozen by default: a rerun over the same store drafts alike."""
    rows = stored_outputs(store, fingerprint, max_tokens, dedupe=dedupe, before_run=before_run)
    keyed = [(run_key(store, run_id), ids) for run_id, ids in reversed(rows)]
    return SuffixCorpus(keyed, max_tokens=max_tokens, fingerprint=fingerprint, frozen=frozen)
