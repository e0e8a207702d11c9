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


MAX_TIMEOUT = 86400.0  # a day: longer is a mistake (and SQLite's busy timeout is a 32-bit count of milliseconds)


def lock_timeout(value: float | None) -> float:
    """Seconds a write waits for the lock: `value`, else WORKBENCH_DB_TIMEOUT, else DEFAULT_TIMEOUT; a number
    in 0..MAX_TIMEOUT (NaN, infinities and negative waits are refused)."""
    import math

    raw = os.environ.get("WORKBENCH_DB_TIMEOUT") if value is None else value
    where = "the store's timeout" if value is not None else "WORKBENCH_DB_TIMEOUT"
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT
    try:
        seconds = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError(f"{where}={str(raw)[:40]!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_TIMEOUT:
        raise InvalidInputError(f"{where}={str(raw)[:40]!r} must be a number of seconds from 0 to {MAX_TIMEOUT:g}")
    return seconds


def check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not a SQLite database, or a SQLite database of another application, before
    any connection can write to it (switching it to WAL would modify it)."""
    if path.is_dir():
        raise CorruptStoreError(f"{path} is a folder, not a trace store: pass a file path (or a database URL) as --db")
    if path.parent.exists() and not path.parent.is_dir():
        raise CorruptStoreError(
            f"{path.parent} is a file, so {path.name} cannot be created inside it: pass another --db"
        )
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except OSError as e:
        raise CorruptStoreError(f"cannot read {path}: {e.strerror or type(e).__name__}; pass another --db") from None
    if head[: len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        raise CorruptStoreError(
            f"{path} is not a SQLite database (corrupt, or another kind of file); it was left untouched: "
            f"move it aside or pass another --db (or WORKBENCH_DB)"
        )
    _check_foreign_tables(path)


STORE_TABLES = {"runs", "steps", "nodes", "run_tags"}


def _check_foreign_tables(path: Path) -> None:
    """Look at the file through a read-only, immutable connection (no lock, no journal, no WAL switch: the
    file stays byte-identical) and refuse, before our own connection (which sets WAL) opens it: tables without
    our schema version (another application's database), an Alembic version this code does not know on
    tables that are not ours (another application that also uses Alembic), and a file without tables that
    another application has marked as its own (a non-zero user_version or application_id)."""
    import sqlite3

    from workbench.store.errors import SchemaVersionError
    from workbench.store.schema_version import known_revision

    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return  # the store's own connection reports what is wrong
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        marks = {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("user_version", "application_id")}
        revision = None
        if "alembic_version" in tables:
            try:
                row = conn.execute("SELECT version_num FROM alembic_version LIMIT 1").fetchone()
            except sqlite3.OperationalError:  # not Alembic's table
                row = ("(no version_num column)",)
            revision = str(row[0])[:64] if row else None
    except sqlite3.DatabaseError:
        return
    finally:
        conn.close()
    tables.discard("sqlite_sequence")
    untouched = "it was left untouched; pass another --db (or WORKBENCH_DB)"
    if not tables:
        marked = {k: v for k, v in marks.items() if v}
        if marked:
            raise SchemaVersionError(
                f"{path} is a SQLite database of another application (no tables, but "
                f"{', '.join(f'{k} {v}' for k, v in marked.items())}), not a trace store; {untouched}"
            )
        return
    if "alembic_version" not in tables:  # what schema_state refuses, refused before any write
        raise SchemaVersionError(
            f"{path} holds tables ({', '.join(sorted(tables)[:5])}) but no spec-workbench schema version: it is not a "
            f"trace store and {untouched}"
        )
    if revision is not None and not known_revision(revision):
        if STORE_TABLES <= tables:
            raise SchemaVersionError(
                f"{path} was written by a newer spec-workbench (schema revision {revision!r}, unknown to this one); "
                f"it was left untouched: upgrade spec-workbench or pass another --db"
            )
        raise SchemaVersionError(
            f"{path} is another application's database (Alembic revision {revision!r}, tables "
            f"{', '.join(sorted(tables - {'alembic_version'})[:5])}), not a trace store; {untouched}"
        )


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
        raise InvalidInputError(
            f"{_redacted(url)} is not a database URL or path: pass a SQLite file path or a URL such as "
            f"postgresql://user@host/db"
        ) from None
    if parsed.get_backend_name() not in SUPPORTED_BACKENDS:
        raise InvalidInputError(
            f"{parsed.render_as_string(hide_password=True)}: the trace store supports SQLite files and "
            f"PostgreSQL URLs ({', '.join(SUPPORTED_BACKENDS)}), not {parsed.get_backend_name()!r}"
        )
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
        raise InvalidInputError(
            f"cannot open {parsed.render_as_string(hide_password=True)}: its database driver is not "
            f"installed ({type(e).__name__}); the trace store supports SQLite files and PostgreSQL URLs"
        ) from None
    except (ArgumentError, TypeError, ValueError) as e:
        raise InvalidInputError(f"cannot open {parsed.render_as_string(hide_password=True)}: {e}") from None
