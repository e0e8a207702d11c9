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
    """Refuse a file that is not a SQLite database, or a SQLite database of another application, before
    any connection can write to it (switching it to WAL would modify it)."""
    if path.is_dir():
        raise CorruptStoreError(f"{path} is a folder, not a trace store: pass a file path (or a database URL) as --db")
    if path.parent.exists() and not path.parent.is_dir():
        raise CorruptStoreError(f"{path.parent} is a file, so {path.name} cannot be created inside it: pass another --db")
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except OSError as e:
        raise CorruptStoreError(f"cannot read {path}: {e.strerror or type(e).__name__}; pass another --db") from None
    if head[:len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        raise CorruptStoreError(
            f"{path} is not a SQLite database (corrupt, or another kind of file); it was left untouched: "
            f"move it aside or pass another --db (or WORKBENCH_DB)")
    _check_foreign_tables(path)


def _check_foreign_tables(path: Path) -> None:
    """Read the table names through a read-only connection: tables without our schema version mean another
    application's database, refused before our own connection (which sets WAL) opens it."""
    import sqlite3

    from workbench.store.errors import SchemaVersionError

    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return  # the store's own connection reports what is wrong
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        return
    finally:
        conn.close()
    tables.discard("sqlite_sequence")
    if tables and "alembic_version" not in tables:  # what schema_state refuses, refused before any write
        raise SchemaVersionError(
            f"{path} holds tables ({', '.join(sorted(tables)[:5])}) but no spec-workbench schema version: it is not a "
            f"trace store and was left untouched; pass another --db (or WORKBENCH_DB)")


SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def make_engine(url: str, timeout: float) -> Engine:
    """The engine for `url`; connections opened with `execution_options(writing=True)` write."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        connect_args = {}
        if parsed.get_backend_name() == "postgresql":  # a write blocked by a lock waits `timeout`, then fails
            connect_args["options"] = f"-c lock_timeout={int(timeout * 1000)}"
        return _create(url, parsed, pool_pre_ping=True, connect_args=connect_args)
    engine = _create(url, parsed)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below), so writes can begin IMMEDIATE
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() not in ("wal", "memory"):
            try:
                cur.execute("PRAGMA journal_mode = WAL")  # only when needed: an existing store is never written on open
            except dbapi_conn.OperationalError:
                pass  # a read-only file or folder: reading works without WAL; a write says it cannot
        cur.execute("PRAGMA synchronous = NORMAL")  # safe with WAL against a killed process
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # A write takes the lock up front, where the busy timeout applies, instead of failing mid-transaction.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("writing") else "BEGIN")

    return engine


def parse_url(url: str):
    """The parsed URL; a malformed one or a backend the store does not support is an InvalidInputError."""
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise InvalidInputError(f"{_redacted(url)} is not a database URL or path: pass a SQLite file path or a URL such as "
                                f"postgresql://user@host/db") from None
    if parsed.get_backend_name() not in SUPPORTED_BACKENDS:
        raise InvalidInputError(f"{parsed.render_as_string(hide_password=True)}: the trace store supports SQLite files and "
                                f"PostgreSQL URLs ({', '.join(SUPPORTED_BACKENDS)}), not {parsed.get_backend_name()!r}")
    return parsed


def _redacted(url: str) -> str:
    """A URL for a message, without a password."""
    import re

    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _create(url: str, parsed, **kwargs) -> Engine:
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        return create_engine(url, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as e:
        raise InvalidInputError(f"cannot open {parsed.render_as_string(hide_password=True)}: its database driver is not "
                                f"installed ({type(e).__name__}); the trace store supports SQLite files and PostgreSQL URLs") from None
    except (ArgumentError, TypeError, ValueError) as e:
        raise InvalidInputError(f"cannot open {parsed.render_as_string(hide_password=True)}: {e}") from None
