"""Tables a process shares between its requests and keeps on disk: CSD's correction memory (core.memory) and
Token Recycling's table (core.drafters.recycle).

- `process_table`: the one table per key in this process, made on first use (requests of one process then
  read and update the same counts);
- `save_tables`: at exit, save the tables that hold something unsaved (a failure is a warning, never a crash
  of a run that already finished);
- `atomic_write`: a file replaced whole or not at all (temporary file in the same folder, fsync, os.replace),
  so a reader or a crash never sees half a table.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Hashable, Iterable, MutableMapping
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar


class Saved(Protocol):
    path: Path | None

    def save(self) -> Path: ...


T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Saved)
_LOCK = threading.Lock()  # held only to find or make a table (and warm it once), never while decoding


def process_table(
    tables: MutableMapping[K, T],
    key: K,
    make: Callable[[], T],
    prepare: Callable[[T], None] | None = None,
) -> T:
    """`tables[key]`, made by `make()` on first use; `prepare(table)`, when given, runs under the same lock on
    every call (a table loading its saved rows once)."""
    with _LOCK:
        table = tables.get(key)
        if table is None:
            table = tables[key] = make()
        if prepare is not None:
            prepare(table)
        return table


def save_tables(tables: Iterable[S], needs_save: Callable[[S], bool], what: str) -> None:
    """Save every table of `tables` that `needs_save`; print a warning for one that cannot be written."""
    for table in list(tables):
        if needs_save(table):
            try:
                table.save()
            except Exception as e:  # never turn a finished run into a crash at exit
                print(f"warning: could not save the {what} {table.path}: {e}")


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Replace `path` by what `write(file)` writes, atomically: readers see the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
