"""The Store: open (and migrate) a database, write runs, query and load them, delete, CSV in and out.

One engine per process and database, a session per unit of work, bulk inserts of lists of dicts;
one writer per Store (a lock). A writer that dies leaves its run `running`; the next Store opened on
the same host marks it `failed` (its pid is gone) and keeps the steps it had.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, text, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from core.errors import InvalidInputError
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.store.compare import compare_traces
from workbench.store.connection import check_sqlite_file, lock_timeout, make_engine, parse_url, resolve_url
from workbench.store.csv_io import read_csv_dir, write_csv
from workbench.store.errors import (
    CorruptStoreError,
    RunNotFoundError,
    StoreError,
    StoreLockedError,
    StoreUnavailableError,
)
from workbench.store.recording import Recording
from workbench.store.rows import chunks, node_from_row, run_from_row, run_row, step_from_row, step_rows, utcnow
from workbench.store.schema import Node, Run, RunTag, Step
from workbench.store.schema_version import current_revision, schema_state, upgrade_to_head


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
    params: dict | None = None  # what it ran with: the runs list marks a run with fitted thresholds (`aasd[auto]`)


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


class Store:
    """One engine per process and database; a session per unit of work."""

    def __init__(self, db: str | None = None, *, timeout: float | None = None, flush_seconds: float = 1.0):
        self.url = resolve_url(db)
        self.timeout = lock_timeout(timeout)
        self.flush_seconds = flush_seconds
        parsed = parse_url(self.url)
        self.where = parsed.render_as_string(hide_password=True)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite and parsed.database and parsed.database != ":memory:":
            path = Path(parsed.database)
            check_sqlite_file(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreUnavailableError(
                    f"cannot create the folder of the trace store {path}: "
                    f"{e.strerror or type(e).__name__}; pass another --db"
                ) from None
        self.engine = make_engine(self.url, self.timeout)
        self._write_engine = self.engine.execution_options(writing=True)
        self._lock = threading.Lock()  # one writer per Store
        try:
            self._prepare_schema()
            try:
                self.mark_abandoned()
            except StoreError:
                if self._writable():
                    raise  # a read-only store is still listed; marking waits for a writer
        except BaseException:
            self.engine.dispose()
            raise

    def _writable(self) -> bool:
        if not self.is_sqlite:
            return True
        path = make_url(self.url).database
        return (
            not path
            or path == ":memory:"
            or (os.access(path, os.W_OK) and os.access(os.path.dirname(path) or ".", os.W_OK))
        )

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
                f"try again when it is done (WORKBENCH_DB_TIMEOUT sets the wait)"
            )
        if "readonly" in low or "read-only" in low or "unable to open" in low:
            return StoreUnavailableError(
                f"the trace store {self.where} cannot be written here ({msg.strip()}); listing and showing runs work, "
                f"but to store runs pass a writable --db (or WORKBENCH_DB)"
            )
        if "not a database" in low or "malformed" in low or "corrupt" in low:
            return CorruptStoreError(
                f"the trace store {self.where} is damaged ({msg.strip()}); it was left as it is: move it aside "
                f"or pass another --db (or WORKBENCH_DB)"
            )
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

    @_translating
    def _prepare_schema(self) -> None:
        with self.engine.connect() as conn:
            if schema_state(conn, self.where) == "current":
                return  # the common case writes nothing
        with self._lock, self._write_engine.begin() as conn:
            if not self.is_sqlite and conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(726173)"))  # two processes creating one schema
            if schema_state(conn, self.where) != "current":
                upgrade_to_head(conn)

    def schema_revision(self) -> str | None:
        with self.engine.connect() as conn:
            return current_revision(conn)

    # -------- writing

    @_translating
    def mark_abandoned(self) -> list[int]:
        """Mark `failed` the runs still `running` whose writer process on this host is gone (killed or crashed)."""
        host = socket.gethostname()
        with self._read() as s:
            rows = s.execute(
                select(Run.id, Run.writer_pid).where(Run.status == "running", Run.writer_host == host)
            ).all()
        dead = [(rid, pid) for rid, pid in rows if pid is not None and pid != os.getpid() and not _pid_alive(pid)]
        if not dead:
            return []
        with self._write() as s:
            for rid, pid in dead:
                s.execute(
                    update(Run)
                    .where(Run.id == rid, Run.status == "running")
                    .values(
                        status="failed",
                        finished=utcnow(),
                        error=f"abandoned: writer process {pid} on {host} ended before the run finished (killed or crashed); "
                        f"the steps it had written are kept",
                    )
                )
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
        row = {**run_row(run), "created": utcnow(), "finished": utcnow()}
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
        row = {
            **run_row(header),
            "created": utcnow(),
            "status": "running",
            "metrics": None,
            "writer_pid": os.getpid(),
            "writer_host": socket.gethostname(),
        }
        with self._write() as s:
            return self._insert_run(s, row, tags)

    @_translating
    def _append_steps(self, run_id: int, steps: Sequence[StepTrace], final: dict | None = None) -> None:
        with self._write() as s:
            self._insert_steps(s, run_id, steps)
            if final is not None:
                s.execute(update(Run).where(Run.id == run_id).values(**final, finished=utcnow()))

    @_translating
    def delete_runs(self, run_ids: Iterable[int]) -> int:
        ids = sorted(set(int(i) for i in run_ids))
        with self._write() as s:
            for table in (Node, Step, RunTag):  # explicit, so it does not depend on ON DELETE CASCADE
                s.execute(delete(table).where(table.run_id.in_(ids)))
            return s.execute(delete(Run).where(Run.id.in_(ids))).rowcount

    # -------- reading

    @_translating
    def list_runs(
        self,
        *,
        method: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = 100,
        any_tag: Sequence[str] | None = None,
    ) -> list[RunSummary]:
        """Newest first. `model` matches the target or the draft model; `any_tag` keeps the runs that carry
        at least one of these tags (the app's visibility: the session's owner tag or `shared`)."""
        q = select(
            Run.id, Run.created, Run.status, Run.method, Run.model, Run.draft_model, Run.metrics, Run.error, Run.params
        )
        if any_tag is not None:
            q = q.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag.in_(list(any_tag)))))
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
        return [
            RunSummary(
                r.id,
                r.created,
                r.status,
                r.method,
                r.model,
                r.draft_model,
                tags.get(r.id, []),
                r.metrics,
                r.error,
                r.params,
            )
            for r in rows
        ]

    @_translating
    def run_tags(self, run_id: int) -> list[str]:
        """The tags of one run; RunNotFoundError when there is no such run."""
        with self._read() as s:
            if s.get(Run, int(run_id)) is None:
                raise RunNotFoundError(
                    f"no run {run_id} in {self.where} (python -m workbench store list shows the runs)"
                )
            return self._tags(s, [int(run_id)]).get(int(run_id), [])

    @_translating
    def run_status(self, run_id: int) -> str:
        """One run's status (running, complete, cancelled, failed), without its steps: what a view following a run
        being written polls; RunNotFoundError when there is no such run."""
        with self._read() as s:
            run = s.get(Run, int(run_id))
            if run is None:
                raise RunNotFoundError(f"no run {run_id} in {self.where}")
            return run.status

    @_translating
    def add_tags(self, run_id: int, tags: Sequence[str]) -> None:
        """Give a run more tags (those it has already are left as they are)."""
        have = set(self.run_tags(run_id))
        new = sorted(set(tags) - have)
        if new:
            with self._write() as s:
                s.execute(insert(RunTag), [{"run_id": int(run_id), "tag": t} for t in new])

    def _tags(self, s: Session, run_ids: list[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        if run_ids:
            for rid, tag in s.execute(
                select(RunTag.run_id, RunTag.tag).where(RunTag.run_id.in_(run_ids)).order_by(RunTag.tag)
            ):
                out.setdefault(rid, []).append(tag)
        return out

    @_translating
    def load_run(self, run_id: int, *, nodes: bool = True) -> StoredRun:
        """A run with its steps (and their nodes unless nodes=False)."""
        with self._read() as s:
            run = s.get(Run, int(run_id))
            if run is None:
                raise RunNotFoundError(
                    f"no run {run_id} in {self.where} (python -m workbench store list shows the runs)"
                )
            by_step: dict[int, list[NodeTrace]] = {}
            if nodes:
                for row in s.execute(
                    select(Node.__table__).where(Node.run_id == run.id).order_by(Node.step, Node.node)
                ):
                    by_step.setdefault(row.step, []).append(node_from_row(row))
            steps = [
                step_from_row(r, by_step.get(r.step, []))
                for r in s.execute(select(Step.__table__).where(Step.run_id == run.id).order_by(Step.step))
            ]
            tags = self._tags(s, [run.id]).get(run.id, [])
            return StoredRun(
                run.id,
                run.created,
                run.finished,
                tags,
                run.metrics,
                run.writer_pid,
                run.writer_host,
                run_from_row(run, steps),
            )

    @_translating
    def load_step(self, run_id: int, step: int) -> StepTrace:
        """One step and its nodes: two primary-key lookups."""
        with self._read() as s:
            row = s.execute(select(Step.__table__).where(Step.run_id == run_id, Step.step == step)).first()
            if row is None:
                raise RunNotFoundError(f"run {run_id} has no step {step} in {self.where}")
            nodes = [
                node_from_row(r)
                for r in s.execute(
                    select(Node.__table__).where(Node.run_id == run_id, Node.step == step).order_by(Node.node)
                )
            ]
            return step_from_row(row, nodes)

    def compare(self, a: int, b: int) -> dict[str, Any]:
        ta, tb = self.load_run(a, nodes=False).trace, self.load_run(b, nodes=False).trace
        ids = {id(ta): a, id(tb): b}  # the traces come without nodes: read the diverging steps' own records
        return {
            "run_a": a,
            "run_b": b,
            **compare_traces(ta, tb, lambda trace, step: self.load_step(ids[id(trace)], step).nodes),
        }

    # -------- CSV (the format is csv_io's)

    @_translating
    def export_csv(self, run_ids: Sequence[int] | None, out_dir: str | Path, *, force: bool = False) -> dict[str, Path]:
        """Write runs.csv, steps.csv and nodes.csv for these runs (all runs when None); files already in
        `out_dir` are replaced only with `force` (csv_io.write_csv)."""
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise InvalidInputError(
                f"{out} is a file; --out names the folder the CSV files go into: pass a new or existing folder"
            )
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidInputError(f"cannot create the folder {out}: {e.strerror or type(e).__name__}") from None
        with self._read() as s:
            if run_ids is None:
                ids = list(s.scalars(select(Run.id).order_by(Run.id)))
            else:
                ids = sorted(set(int(i) for i in run_ids))
                found = set(s.scalars(select(Run.id).where(Run.id.in_(ids))))
                missing = [i for i in ids if i not in found]
                if missing:
                    raise RunNotFoundError(f"no run {', '.join(map(str, missing))} in {self.where}")
            return write_csv(s, ids, self._tags(s, ids), out, force=force)

    @_translating
    def import_csv(self, in_dir: str | Path, *, renumber: bool = False) -> list[int]:
        """Read runs.csv, steps.csv and nodes.csv; every row is checked before anything is written, and
        everything is written in one transaction. Returns the new run ids."""
        runs, steps, nodes = read_csv_dir(Path(in_dir))
        with self._write() as s:
            ids = [r["id"] for r in runs]
            taken = (
                []
                if renumber
                else sorted(  # in bounded IN lists: SQLite takes at most 32,766 variables
                    rid for chunk in chunks(ids, 10_000) for rid in s.scalars(select(Run.id).where(Run.id.in_(chunk)))
                )
            )
            if taken:
                more = f" and {len(taken) - 20} more" if len(taken) > 20 else ""
                raise InvalidInputError(
                    f"runs {', '.join(map(str, taken[:20]))}{more} are already in {self.where}; nothing was imported "
                    f"(pass --renumber to give the imported runs new ids)"
                )
            new_id: dict[int, int] = {}
            for chunk in chunks(runs, 2_000):  # one executemany per chunk, not one statement per run
                rows = [{k: v for k, v in r.items() if k != "tags" and not (renumber and k == "id")} for r in chunk]
                if renumber:
                    made = s.scalars(insert(Run).returning(Run.id, sort_by_parameter_order=True), rows).all()
                else:
                    s.execute(insert(Run), rows)
                    made = [r["id"] for r in chunk]
                new_id.update(zip((r["id"] for r in chunk), made))
                tag_rows = [{"run_id": rid, "tag": t} for r, rid in zip(chunk, made) for t in sorted(set(r["tags"]))]
                if tag_rows:
                    s.execute(insert(RunTag), tag_rows)
            for rows, model in ((steps, Step), (nodes, Node)):
                for chunk in chunks(rows, 20_000):
                    s.execute(model.__table__.insert(), [{**row, "run_id": new_id[row["run_id"]]} for row in chunk])
            if not renumber and ids and s.get_bind().dialect.name == "postgresql":
                # explicit ids do not move the sequence; later runs must not collide with these
                s.execute(text("SELECT setval(pg_get_serial_sequence('runs', 'id'), (SELECT max(id) FROM runs))"))
        return [new_id[r] for r in sorted(new_id)]
