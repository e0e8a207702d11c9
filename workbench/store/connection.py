"""Where the store lives and how it is opened: URL resolution, the lock wait, one engine per database.

SQLite gets WAL, a busy timeout and writes that take the lock up front (BEGIN IMMEDIATE), so two
writers wait for each other instead of failing mid-transaction; PostgreSQL gets a lock timeout.
"""
from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from core.errors import InvalidInputError
from workbench.store.errors import CorruptStoreError

DEFAULT_TIMEOUT = 30.0  # seconds a write waits for another writer's lock (WORKBENCH_DB_TIMEOUT)
SQLITE_MAGIC = b"SQLite format 3\x00"


def resolve_url(db: str | None = None) -> str:
    """--db, else WORKBENCH_DB, else <workbench home>/traces.db. A bare path means a SQLite file."""
    db = db or os.environ.get("WORKBENCH_DB")
    if not db:
        from core.models import workbench_home  # imports torch: only when the default is needed

        db = str(workbench_home() / "traces.db")
    return db if "://" in db else f"sqlite:///{Path(db).expanduser().resolve()}"


def lock_timeout(value: float | None) -> float:
    """Seconds a write waits for the lock: `value`, else WORKBENCH_DB_TIMEOUT, else DEFAULT_TIMEOUT."""
    if value is not None:
        return float(value)
    raw = os.environ.get("WORKBENCH_DB_TIMEOUT")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        raise InvalidInputError(f"WORKBENCH_DB_TIMEOUT={raw!r} is not a number of seconds") from None


def check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not a SQLite database before any connection can write to it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise CorruptStoreError(
            f"{path} is not a SQLite database (corrupt, or another kind of file); it was left untouched: "
            f"move it aside or pass another --db (or WORKBENCH_DB)")


def make_engine(url: str, timeout: float) -> Engine:
    """The engine for `url`; connections opened with `execution_options(writing=True)` write."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        connect_args = {}
        if parsed.get_backend_name() == "postgresql":  # a write blocked by a lock waits `timeout`, then fails
            connect_args["options"] = f"-c lock_timeout={int(timeout * 1000)}"
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below), so writes can begin IMMEDIATE
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() not in ("wal", "memory"):
            cur.execute("PRAGMA journal_mode = WAL")  # only when needed: an existing store is never written on open
        cur.execute("PRAGMA synchronous = NORMAL")  # safe with WAL against a killed process
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # A write takes the lock up front, where the busy timeout applies, instead of failing mid-transaction.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("writing") else "BEGIN")

    return engine
