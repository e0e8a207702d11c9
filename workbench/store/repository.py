"""The trace store: every run, its steps and one row per tree node per step, in SQLite by default
(any SQLAlchemy URL works; PostgreSQL is tested), with CSV export and import.

Three tables, modelled on Phoenix's spans table: `runs` (one per generation), `steps` keyed by
(run_id, step), `nodes` keyed by (run_id, step, node) with the parent index, and `run_tags`.
Trace fields that have no column yet land in each table's `attributes` JSON, so nothing is lost
when core/trace.py grows a field before the schema does.

Writing: one writer per Store (a lock), a session per unit of work, bulk inserts of lists of dicts.
A run is inserted as `running` first; its steps follow in batches; the final batch and the status
change (`complete`, `cancelled`, `failed`) share one transaction, so a `complete` run always has all
its steps. A writer that dies leaves its run `running`; the next Store opened on the same host marks
it `failed` (its pid is gone) and keeps the steps it had.
"""
from __future__ import annotations

import csv
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, DateTime, Double, ForeignKey, ForeignKeyConstraint, Integer, MetaData, Text, create_engine,
                        delete, event, func, insert, inspect, select, text, update)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from core.stats import first_divergence, run_metrics
from core.errors import InvalidInputError, WorkbenchError
from core.trace import DECISIONS, SOURCES, STATUSES, NodeTrace, RunTrace, StepTrace

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
DEFAULT_TIMEOUT = 30.0  # seconds a write waits for another writer's lock (WORKBENCH_DB_TIMEOUT)


class StoreError(WorkbenchError):
    """The trace store cannot do what was asked; the message says why and what to do."""


class StoreLockedError(StoreError):
    pass


class CorruptStoreError(StoreError):
    pass


class SchemaVersionError(StoreError):
    pass


class StoreUnavailableError(StoreError):
    pass


class RunNotFoundError(StoreError, InvalidInputError):
    pass


class CsvFormatError(InvalidInputError):
    pass


# ---------------------------------------------------------------- schema

class Base(DeclarativeBase):
    # Named constraints, so Alembic's batch mode can find them again on SQLite.
    metadata = MetaData(naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    })


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted run's id is never handed out again

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created: Mapped[datetime] = mapped_column(DateTime, index=True)  # UTC
    finished: Mapped[datetime | None] = mapped_column(DateTime)
    status: Mapped[str] = mapped_column(Text, index=True)
    error: Mapped[str | None] = mapped_column(Text)
    method: Mapped[str] = mapped_column(Text, index=True)
    params: Mapped[dict] = mapped_column(JSON)
    model: Mapped[str] = mapped_column(Text, index=True)
    model_fingerprint: Mapped[str | None] = mapped_column(Text)
    draft_model: Mapped[str | None] = mapped_column(Text, index=True)
    draft_fingerprint: Mapped[str | None] = mapped_column(Text)
    device: Mapped[str] = mapped_column(Text)
    dtype: Mapped[str] = mapped_column(Text)
    prompt: Mapped[str] = mapped_column(Text)
    prompt_ids: Mapped[list] = mapped_column(JSON)
    context: Mapped[str | None] = mapped_column(Text)
    output_text: Mapped[str] = mapped_column(Text)
    output_ids: Mapped[list] = mapped_column(JSON)
    stop_reason: Mapped[str | None] = mapped_column(Text)
    prefill_seconds: Mapped[float] = mapped_column(Double)
    decode_seconds: Mapped[float] = mapped_column(Double)
    external_accept_lengths: Mapped[list | None] = mapped_column(JSON(none_as_null=True))
    metrics: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))
    writer_pid: Mapped[int | None] = mapped_column(Integer)
    writer_host: Mapped[str | None] = mapped_column(Text)
    attributes: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))


class RunTag(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(Text, primary_key=True, index=True)


class Step(Base):
    __tablename__ = "steps"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    cache_pos: Mapped[int] = mapped_column(Integer)
    tree_size: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    emitted: Mapped[list] = mapped_column(JSON)
    draft_ms: Mapped[float] = mapped_column(Double)
    forward_ms: Mapped[float] = mapped_column(Double)
    verify_ms: Mapped[float] = mapped_column(Double)
    bookkeeping_ms: Mapped[float] = mapped_column(Double)
    attributes: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))


class Node(Base):
    __tablename__ = "nodes"
    __table_args__ = (ForeignKeyConstraint(["run_id", "step"], ["steps.run_id", "steps.step"], ondelete="CASCADE"),)

    # The primary key (run_id, step, node) is the index that loading one step reads.
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[int] = mapped_column(Integer, primary_key=True)
    cache_pos: Mapped[int] = mapped_column(Integer)
    parent: Mapped[int] = mapped_column(Integer)
    depth: Mapped[int] = mapped_column(Integer)
    token_id: Mapped[int] = mapped_column(Integer)
    token_text: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    p: Mapped[float | None] = mapped_column(Double)
    entropy: Mapped[float | None] = mapped_column(Double)
    max_p: Mapped[float | None] = mapped_column(Double)
    p_eos: Mapped[float | None] = mapped_column(Double)
    rank: Mapped[int | None] = mapped_column(Integer)
    logit_gap: Mapped[float | None] = mapped_column(Double)
    threshold: Mapped[float | None] = mapped_column(Double)
    draft_p: Mapped[float | None] = mapped_column(Double)
    correction_id: Mapped[int | None] = mapped_column(Integer)
    mem_count: Mapped[int | None] = mapped_column(Integer)
    attributes: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))


# ---------------------------------------------------------------- trace <-> rows (pure)

def _names(cls) -> list[str]:
    return [f.name for f in fields(cls)]


RUN_FIELDS = [n for n in _names(RunTrace) if n != "steps"]
STEP_FIELDS = [n for n in _names(StepTrace) if n != "nodes"]
NODE_FIELDS = _names(NodeTrace)
RUN_EXTRA = [n for n in RUN_FIELDS if n not in Run.__table__.columns]
STEP_EXTRA = [n for n in STEP_FIELDS if n != "index" and n not in Step.__table__.columns]
NODE_EXTRA = [n for n in NODE_FIELDS if n not in Node.__table__.columns]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def run_row(run: RunTrace) -> dict[str, Any]:
    """The `runs` columns of a trace (not id, created, writer); fields without a column go to `attributes`."""
    row = {name: getattr(run, name) for name in RUN_FIELDS}
    row["attributes"] = {k: row.pop(k) for k in RUN_EXTRA} or None
    for name in ("context", "error", "draft_model", "stop_reason"):  # CSV cannot tell "" from null: keep null only
        row[name] = row[name] or None
    row["params"] = dict(row["params"])
    row["metrics"] = run_metrics(run) if run.steps or run.output_ids else None
    return row


def _values(obj: Any, names: list[str]) -> dict[str, Any]:
    d = getattr(obj, "__dict__", None)  # a plain dataclass: copying its dict is the fast path
    return dict(d) if d is not None else {name: getattr(obj, name) for name in names}


def step_rows(run_id: int, steps: Iterable[StepTrace]) -> tuple[list[dict], list[dict]]:
    """Rows for `steps` and `nodes`: lists of dicts for one bulk insert each."""
    srows, nrows = [], []
    for s in steps:
        row = _values(s, STEP_FIELDS)
        del row["nodes"]
        row["step"] = row.pop("index")
        row["attributes"] = {k: row.pop(k) for k in STEP_EXTRA} or None
        row["run_id"] = run_id
        srows.append(row)
        for n in s.nodes:
            nrow = _values(n, NODE_FIELDS)
            nrow["attributes"] = {k: nrow.pop(k) for k in NODE_EXTRA} or None
            nrow["run_id"] = run_id
            nrows.append(nrow)
    return srows, nrows


def _known(cls_fields: list[str], attributes: dict | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if k in cls_fields}


def node_from_row(row: Any) -> NodeTrace:
    m = row._mapping
    return NodeTrace(**{k: m[k] for k in NODE_FIELDS if k in m}, **_known(NODE_FIELDS, m["attributes"]))


def step_from_row(row: Any, nodes: list[NodeTrace]) -> StepTrace:
    m = row._mapping
    values = {k: m[k] for k in STEP_FIELDS if k in m}
    return StepTrace(index=m["step"], nodes=nodes, **values, **_known(STEP_FIELDS, m["attributes"]))


def run_from_row(run: Run, steps: list[StepTrace]) -> RunTrace:
    values = {k: getattr(run, k) for k in RUN_FIELDS if k in Run.__table__.columns}
    return RunTrace(steps=steps, **values, **_known(RUN_FIELDS, run.attributes))


@dataclass
class RunSummary:
    id: int
    created: datetime
    status: str
    method: str
    model: str
    draft_model: str | None
    tags: list[str]
    metrics: dict | None
    error: str | None


@dataclass
class StoredRun:
    id: int
    created: datetime
    finished: datetime | None
    tags: list[str]
    metrics: dict | None
    writer_pid: int | None
    writer_host: str | None
    trace: RunTrace


def compare_traces(a: RunTrace, b: RunTrace) -> dict[str, Any]:
    """Where two runs' outputs first differ (token index and the step of each run that emitted it)
    and their per-step lengths."""
    first = first_divergence(a.output_ids, b.output_ids)

    def step_of(run: RunTrace, token: int | None) -> int | None:
        if token is None:
            return None
        total = 0
        for i, n in enumerate(run.accept_lengths):
            total += n
            if token < total:
                return i
        return None

    def at(ids: list[int], i: int | None) -> int | None:
        return ids[i] if i is not None and i < len(ids) else None

    return {
        "identical": first is None,
        "first_divergence": first,
        "token_a": at(a.output_ids, first), "token_b": at(b.output_ids, first),
        "step_a": step_of(a, first), "step_b": step_of(b, first),
        "tokens_a": len(a.output_ids), "tokens_b": len(b.output_ids),
        "lengths_a": a.accept_lengths, "lengths_b": b.accept_lengths,
    }


# ---------------------------------------------------------------- engine

def resolve_url(db: str | None = None) -> str:
    """--db, else WORKBENCH_DB, else <workbench home>/traces.db. A bare path means a SQLite file."""
    db = db or os.environ.get("WORKBENCH_DB")
    if not db:
        from core.models import workbench_home  # imports torch: only when the default is needed

        db = str(workbench_home() / "traces.db")
    return db if "://" in db else f"sqlite:///{Path(db).expanduser().resolve()}"


def _timeout(value: float | None) -> float:
    if value is not None:
        return float(value)
    raw = os.environ.get("WORKBENCH_DB_TIMEOUT")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        raise InvalidInputError(f"WORKBENCH_DB_TIMEOUT={raw!r} is not a number of seconds") from None


SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not a SQLite database before any connection can write to it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise CorruptStoreError(
            f"{path} is not a SQLite database (corrupt, or another kind of file); it was left untouched: "
            f"move it aside or pass another --db (or WORKBENCH_DB)")


def _make_engine(url: str, timeout: float):
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


@lru_cache(maxsize=1)
def _scripts():
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _translating(fn):
    """Turn driver errors into StoreErrors that say what happened and what to do."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except sa_exc.DBAPIError as e:
            raise self._explain(e) from e
    return wrapper


# ---------------------------------------------------------------- the store

class Store:
    """One engine per process and database; a session per unit of work."""

    def __init__(self, db: str | None = None, *, timeout: float | None = None, flush_seconds: float = 1.0):
        self.url = resolve_url(db)
        self.timeout = _timeout(timeout)
        self.flush_seconds = flush_seconds
        parsed = make_url(self.url)
        self.where = parsed.render_as_string(hide_password=True)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite and parsed.database and parsed.database != ":memory:":
            path = Path(parsed.database)
            _check_sqlite_file(path)
            path.parent.mkdir(parents=True, exist_ok=True)
        self.engine = _make_engine(self.url, self.timeout)
        self._write_engine = self.engine.execution_options(writing=True)
        self._lock = threading.Lock()  # one writer per Store
        try:
            self._prepare_schema()
            self.mark_abandoned()
        except BaseException:
            self.engine.dispose()
            raise

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _explain(self, e: sa_exc.DBAPIError) -> StoreError:
        msg = str(e.orig)
        low = msg.lower()
        if "locked" in low or "busy" in low or "lock timeout" in low:
            return StoreLockedError(
                f"the trace store {self.where} is locked by another writer and stayed locked for {self.timeout:g} s; "
                f"try again when it is done (WORKBENCH_DB_TIMEOUT sets the wait)")
        if "not a database" in low or "malformed" in low or "corrupt" in low:
            return CorruptStoreError(
                f"the trace store {self.where} is damaged ({msg.strip()}); it was left as it is: move it aside "
                f"or pass another --db (or WORKBENCH_DB)")
        if isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError)) and not self.is_sqlite:
            return StoreUnavailableError(f"cannot use the trace store {self.where}: {msg.strip()}")
        return StoreError(f"the trace store {self.where} failed: {msg.strip()}")

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._lock, Session(self._write_engine) as session, session.begin():
            yield session

    def _read(self) -> Session:
        return Session(self.engine)

    # -------- schema version

    def _schema_state(self, conn) -> str:
        from alembic.runtime.migration import MigrationContext
        from alembic.util import CommandError

        current = MigrationContext.configure(conn).get_current_revision()
        scripts = _scripts()
        if current == scripts.get_current_head():
            return "current"
        if current is None:
            tables = inspect(conn).get_table_names()
            if tables:
                raise SchemaVersionError(
                    f"{self.where} holds tables ({', '.join(sorted(tables)[:5])}) but no spec-workbench schema version: "
                    f"it is not a trace store; pass another --db (or WORKBENCH_DB)")
            return "empty"
        try:
            scripts.get_revision(current)
        except CommandError:
            raise SchemaVersionError(
                f"{self.where} was written by a newer spec-workbench (schema revision {current}, this one knows up "
                f"to {scripts.get_current_head()}); upgrade spec-workbench or pass another --db") from None
        return "old"

    @_translating
    def _prepare_schema(self) -> None:
        with self.engine.connect() as conn:
            if self._schema_state(conn) == "current":
                return  # the common case writes nothing
        from alembic import command
        from alembic.config import Config

        with self._lock, self._write_engine.begin() as conn:
            if not self.is_sqlite and conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(726173)"))  # two processes creating one schema
            if self._schema_state(conn) == "current":
                return
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def schema_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    # -------- writing

    @_translating
    def mark_abandoned(self) -> list[int]:
        """Mark `failed` the runs still `running` whose writer process on this host is gone (killed or crashed)."""
        host = socket.gethostname()
        with self._read() as s:
            rows = s.execute(select(Run.id, Run.writer_pid).where(Run.status == "running", Run.writer_host == host)).all()
        dead = [(rid, pid) for rid, pid in rows if pid is not None and pid != os.getpid() and not _pid_alive(pid)]
        if not dead:
            return []
        with self._write() as s:
            for rid, pid in dead:
                s.execute(update(Run).where(Run.id == rid, Run.status == "running").values(
                    status="failed", finished=_utcnow(),
                    error=f"abandoned: writer process {pid} on {host} ended before the run finished (killed or crashed); "
                          f"the steps it had written are kept"))
        return [rid for rid, _ in dead]

    def _insert_run(self, s: Session, row: dict, tags: Sequence[str]) -> int:
        run_id = s.scalar(insert(Run).values(**row).returning(Run.id))
        if tags:
            s.execute(insert(RunTag), [{"run_id": run_id, "tag": t} for t in sorted(set(tags))])
        return run_id

    def _insert_steps(self, s: Session, run_id: int, steps: Sequence[StepTrace]) -> None:
        srows, nrows = step_rows(run_id, steps)
        # Core inserts of lists of dicts: one executemany each, a third of the ORM bulk path's time
        if srows:
            s.execute(Step.__table__.insert(), srows)
        if nrows:
            s.execute(Node.__table__.insert(), nrows)

    @_translating
    def save_run(self, run: RunTrace, tags: Sequence[str] = ()) -> int:
        """Store a finished run with all its steps and nodes in one transaction; returns its id."""
        row = {**run_row(run), "created": _utcnow(), "finished": _utcnow()}
        if row["status"] == "running":
            row["status"] = "complete"
        with self._write() as s:
            run_id = self._insert_run(s, row, tags)
            self._insert_steps(s, run_id, run.steps)
        return run_id

    def recording(self, header: RunTrace, tags: Sequence[str] = (), flush_seconds: float | None = None) -> Recording:
        """`with store.recording(header) as rec: rec.add_step(step) ...; rec.finish(run)`.

        `header` is the run as known before decoding (method, params, models, prompt). Steps are written
        in batches every `flush_seconds`; an exception marks the run failed (cancelled for Ctrl-C)."""
        return Recording(self, header, tags, self.flush_seconds if flush_seconds is None else flush_seconds)

    @_translating
    def _begin_run(self, header: RunTrace, tags: Sequence[str]) -> int:
        row = {**run_row(header), "created": _utcnow(), "status": "running", "metrics": None,
               "writer_pid": os.getpid(), "writer_host": socket.gethostname()}
        with self._write() as s:
            return self._insert_run(s, row, tags)

    @_translating
    def _append_steps(self, run_id: int, steps: Sequence[StepTrace], final: dict | None = None) -> None:
        with self._write() as s:
            self._insert_steps(s, run_id, steps)
            if final is not None:
                s.execute(update(Run).where(Run.id == run_id).values(**final, finished=_utcnow()))

    @_translating
    def delete_runs(self, run_ids: Iterable[int]) -> int:
        ids = sorted(set(int(i) for i in run_ids))
        with self._write() as s:
            for table in (Node, Step, RunTag):  # explicit, so it does not depend on ON DELETE CASCADE
                s.execute(delete(table).where(table.run_id.in_(ids)))
            return s.execute(delete(Run).where(Run.id.in_(ids))).rowcount

    # -------- reading

    @_translating
    def list_runs(self, *, method: str | None = None, model: str | None = None, tag: str | None = None,
                  status: str | None = None, since: datetime | None = None, until: datetime | None = None,
                  limit: int | None = 100) -> list[RunSummary]:
        """Newest first. `model` matches the target or the draft model."""
        q = select(Run.id, Run.created, Run.status, Run.method, Run.model, Run.draft_model, Run.metrics, Run.error)
        if method:
            q = q.where(Run.method == method)
        if model:
            q = q.where((Run.model == model) | (Run.draft_model == model))
        if tag:
            q = q.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
        if status:
            q = q.where(Run.status == status)
        if since:
            q = q.where(Run.created >= since)
        if until:
            q = q.where(Run.created < until)
        q = q.order_by(Run.id.desc()).limit(limit)
        with self._read() as s:
            rows = s.execute(q).all()
            tags = self._tags(s, [r.id for r in rows])
        return [RunSummary(r.id, r.created, r.status, r.method, r.model, r.draft_model, tags.get(r.id, []), r.metrics, r.error)
                for r in rows]

    def _tags(self, s: Session, run_ids: list[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        if run_ids:
            for rid, tag in s.execute(select(RunTag.run_id, RunTag.tag).where(RunTag.run_id.in_(run_ids)).order_by(RunTag.tag)):
                out.setdefault(rid, []).append(tag)
        return out

    @_translating
    def load_run(self, run_id: int, *, nodes: bool = True) -> StoredRun:
        """A run with its steps (and their nodes unless nodes=False)."""
        with self._read() as s:
            run = s.get(Run, int(run_id))
            if run is None:
                raise RunNotFoundError(f"no run {run_id} in {self.where} (python -m workbench store list shows the runs)")
            by_step: dict[int, list[NodeTrace]] = {}
            if nodes:
                for row in s.execute(select(Node.__table__).where(Node.run_id == run.id).order_by(Node.step, Node.node)):
                    by_step.setdefault(row.step, []).append(node_from_row(row))
            steps = [step_from_row(r, by_step.get(r.step, []))
                     for r in s.execute(select(Step.__table__).where(Step.run_id == run.id).order_by(Step.step))]
            tags = self._tags(s, [run.id]).get(run.id, [])
            return StoredRun(run.id, run.created, run.finished, tags, run.metrics, run.writer_pid, run.writer_host,
                             run_from_row(run, steps))

    @_translating
    def load_step(self, run_id: int, step: int) -> StepTrace:
        """One step and its nodes: two primary-key lookups."""
        with self._read() as s:
            row = s.execute(select(Step.__table__).where(Step.run_id == run_id, Step.step == step)).first()
            if row is None:
                raise RunNotFoundError(f"run {run_id} has no step {step} in {self.where}")
            nodes = [node_from_row(r) for r in s.execute(
                select(Node.__table__).where(Node.run_id == run_id, Node.step == step).order_by(Node.node))]
            return step_from_row(row, nodes)

    def compare(self, a: int, b: int) -> dict[str, Any]:
        return {"run_a": a, "run_b": b, **compare_traces(self.load_run(a, nodes=False).trace, self.load_run(b, nodes=False).trace)}

    # -------- CSV

    @_translating
    def export_csv(self, run_ids: Sequence[int] | None, out_dir: str | Path) -> dict[str, Path]:
        """Write runs.csv, steps.csv and nodes.csv for these runs (all runs when None)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with self._read() as s:
            if run_ids is None:
                ids = list(s.scalars(select(Run.id).order_by(Run.id)))
            else:
                ids = sorted(set(int(i) for i in run_ids))
                found = set(s.scalars(select(Run.id).where(Run.id.in_(ids))))
                missing = [i for i in ids if i not in found]
                if missing:
                    raise RunNotFoundError(f"no run {', '.join(map(str, missing))} in {self.where}")
            tags = self._tags(s, ids)
            paths = {}
            for name, table in CSV_TABLES.items():
                cols = csv_columns(name)
                path = paths[name] = out / f"{name}.csv"
                with path.open("w", encoding="utf-8", newline="") as f:
                    w = csv.writer(f, lineterminator="\n")
                    w.writerow(cols)
                    key = table.c.id if name == "runs" else table.c.run_id
                    order = [c for c in table.primary_key.columns]
                    for chunk in _chunks(ids, 500):
                        for row in s.execute(select(table).where(key.in_(chunk)).order_by(*order)):
                            m = dict(row._mapping)
                            if name == "runs":
                                m["run_id"] = m.pop("id")
                                m["tags"] = tags.get(m["run_id"], [])
                            w.writerow([_format(table_type(name, c), m[c]) for c in cols])
        return paths

    @_translating
    def import_csv(self, in_dir: str | Path, *, renumber: bool = False) -> list[int]:
        """Read runs.csv, steps.csv and nodes.csv; every row is checked before anything is written, and
        everything is written in one transaction. Returns the new run ids."""
        runs, steps, nodes = read_csv_dir(Path(in_dir))
        with self._write() as s:
            ids = [r["id"] for r in runs]
            taken = sorted(set(s.scalars(select(Run.id).where(Run.id.in_(ids))))) if ids and not renumber else []
            if taken:
                raise InvalidInputError(
                    f"runs {', '.join(map(str, taken))} are already in {self.where}; nothing was imported "
                    f"(pass --renumber to give the imported runs new ids)")
            new_id: dict[int, int] = {}
            for r in runs:
                tags = r.pop("tags")
                if renumber:
                    old = r.pop("id")
                    new_id[old] = self._insert_run(s, r, tags)
                else:
                    new_id[r["id"]] = r["id"]
                    s.execute(insert(Run).values(**r))
                    if tags:
                        s.execute(insert(RunTag), [{"run_id": r["id"], "tag": t} for t in tags])
            for rows, model in ((steps, Step), (nodes, Node)):
                for chunk in _chunks(rows, 20_000):
                    s.execute(model.__table__.insert(), [{**row, "run_id": new_id[row["run_id"]]} for row in chunk])
            if not renumber and ids and s.get_bind().dialect.name == "postgresql":
                # explicit ids do not move the sequence; later runs must not collide with these
                s.execute(text("SELECT setval(pg_get_serial_sequence('runs', 'id'), (SELECT max(id) FROM runs))"))
        return [new_id[r] for r in sorted(new_id)]


class Recording:
    """A run being written while it decodes (see Store.recording)."""

    def __init__(self, store: Store, header: RunTrace, tags: Sequence[str], flush_seconds: float):
        self.store, self.header, self.tags, self.flush_seconds = store, header, tags, flush_seconds
        self.run_id: int | None = None
        self.status: str | None = None
        self._pending: list[StepTrace] = []
        self._next_index = 0  # steps below this index are written
        self._last_flush = time.monotonic()

    def __enter__(self) -> Recording:
        self.run_id = self.store._begin_run(self.header, self.tags)
        return self

    def add_step(self, step: StepTrace) -> None:
        self._pending.append(step)
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        self._write(self._pending)

    def _write(self, steps: Sequence[StepTrace], final: dict | None = None) -> None:
        todo = [s for s in steps if s.index >= self._next_index]
        self.store._append_steps(self.run_id, todo, final)
        if todo:
            self._next_index = todo[-1].index + 1
        self._pending = []
        self._last_flush = time.monotonic()

    def finish(self, run: RunTrace) -> None:
        """Write the remaining steps and the final run fields in the same transaction as the status."""
        final = run_row(run)
        final["status"] = "complete" if final["status"] == "running" else final["status"]
        self._write(run.steps or self._pending, final)
        self.status = final["status"]

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.status is not None or self.run_id is None:
            return False
        if exc_type is None:
            status, error = "failed", "the recording ended before the run finished"
        elif issubclass(exc_type, KeyboardInterrupt):
            status, error = "cancelled", "interrupted"
        else:
            status, error = "failed", f"{exc_type.__name__}: {exc}"
        try:
            self._write(self._pending, {"status": status, "error": error})
            self.status = status
        except StoreError as e:
            if exc is not None and hasattr(exc, "add_note"):
                exc.add_note(f"(the trace store could not mark run {self.run_id} {status}: {e})")
            elif exc is None:
                raise
        return False


# ---------------------------------------------------------------- CSV format (pure)

CSV_TABLES = {"runs": Run.__table__, "steps": Step.__table__, "nodes": Node.__table__}


def csv_columns(name: str) -> list[str]:
    cols = [c.name for c in CSV_TABLES[name].columns]
    if name == "runs":
        cols = ["run_id" if c == "id" else c for c in cols] + ["tags"]
    return cols


def table_type(name: str, column: str) -> str:
    if name == "runs" and column in ("run_id", "tags"):
        return "int" if column == "run_id" else "json"
    t = CSV_TABLES[name].c[column].type
    if isinstance(t, JSON):
        return "json"
    if isinstance(t, Double):
        return "float"
    if isinstance(t, Integer):
        return "int"
    if isinstance(t, DateTime):
        return "datetime"
    return "text"


def _format(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "json":
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if kind == "float":
        return repr(float(value))  # the shortest text that reads back to the same double
    if kind == "datetime":
        return value.isoformat(timespec="microseconds")
    return str(value)


def _parse(kind: str, raw: str, nullable: bool) -> Any:
    if raw == "" and (nullable or kind != "text"):
        if not nullable:
            raise ValueError("is empty but required")
        return None
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "json":
        return json.loads(raw)
    if kind == "datetime":
        return datetime.fromisoformat(raw)
    return raw


# Values a column must take, checked on import.
CSV_CHOICES = {("runs", "status"): STATUSES, ("nodes", "source"): SOURCES, ("nodes", "decision"): DECISIONS}
CSV_JSON_KINDS = {("runs", "params"): dict, ("runs", "tags"): list, ("runs", "prompt_ids"): list,
                  ("runs", "output_ids"): list, ("steps", "emitted"): list}


def _read_table(path: Path, name: str) -> list[dict[str, Any]]:
    if not path.exists():
        raise CsvFormatError(f"{path} is missing: an export folder holds runs.csv, steps.csv and nodes.csv")
    cols = csv_columns(name)
    table = CSV_TABLES[name]
    rows = []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != cols:
            missing = [c for c in cols if c not in (header or [])]
            extra = [c for c in (header or []) if c not in cols]
            raise CsvFormatError(f"{path.name}: the header does not match this schema"
                                 + (f"; missing columns {missing}" if missing else "")
                                 + (f"; unknown columns {extra}" if extra else "")
                                 + ("; columns out of order" if not missing and not extra else ""))
        # Rows are counted as a spreadsheet shows them (the header is row 1); a quoted field may span lines.
        for line, values in enumerate(reader, start=2):
            if len(values) != len(cols):
                raise CsvFormatError(f"{path.name} row {line}: {len(values)} fields, expected {len(cols)}")
            row = {}
            for col, raw in zip(cols, values):
                db_col = "id" if (name == "runs" and col == "run_id") else col
                nullable = col != "tags" and table.c[db_col].nullable and not table.c[db_col].primary_key
                try:
                    value = _parse(table_type(name, col), raw, nullable)
                    choices = CSV_CHOICES.get((name, col))
                    if choices and value not in choices:
                        raise ValueError(f"must be one of {', '.join(choices)}")
                    kind = CSV_JSON_KINDS.get((name, col))
                    if kind and not isinstance(value, kind):
                        raise ValueError(f"must be a JSON {kind.__name__}")
                except ValueError as e:
                    raise CsvFormatError(f"{path.name} row {line}, column {col!r}: {e} (got {raw[:80]!r}); nothing was imported") from None
                row[db_col] = value
            row["_line"] = line
            rows.append(row)
    return rows


def read_csv_dir(folder: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """Parse and check an export folder: every value, and every step and node against its run and step."""
    runs = _read_table(folder / "runs.csv", "runs")
    steps = _read_table(folder / "steps.csv", "steps")
    nodes = _read_table(folder / "nodes.csv", "nodes")

    def unique(rows: list[dict], file: str, key) -> set:
        seen = set()
        for r in rows:
            k = key(r)
            if k in seen:
                raise CsvFormatError(f"{file} row {r['_line']}: {k} appears twice; nothing was imported")
            seen.add(k)
        return seen

    run_ids = unique(runs, "runs.csv", lambda r: r["id"])
    step_keys = unique(steps, "steps.csv", lambda r: (r["run_id"], r["step"]))
    unique(nodes, "nodes.csv", lambda r: (r["run_id"], r["step"], r["node"]))
    for r in steps:
        if r["run_id"] not in run_ids:
            raise CsvFormatError(f"steps.csv row {r['_line']}, column 'run_id': run {r['run_id']} is not in runs.csv; nothing was imported")
    for r in nodes:
        if (r["run_id"], r["step"]) not in step_keys:
            raise CsvFormatError(f"nodes.csv row {r['_line']}, column 'step': run {r['run_id']} has no step {r['step']} "
                                 f"in steps.csv; nothing was imported")
    for rows in (runs, steps, nodes):
        for r in rows:
            del r["_line"]
    return runs, steps, nodes


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
