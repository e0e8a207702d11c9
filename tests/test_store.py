"""The trace store on SQLite and, when WORKBENCH_TEST_PG_URL names a server (.ci/run starts one), on PostgreSQL:
round trips, atomic runs, killed writers, corrupt and locked files, CSV, concurrency and the CLI."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.commands.main import main
from workbench.store import (
    CorruptStoreError,
    CsvFormatError,
    RunNotFoundError,
    SchemaVersionError,
    Store,
    StoreLockedError,
    compare_traces,
    resolve_url,
)

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("WORKBENCH_TEST_PG_URL")
BACKENDS = [
    "sqlite",
    pytest.param(
        "postgresql",
        marks=pytest.mark.skipif(
            not PG_URL, reason="no PostgreSQL server: set WORKBENCH_TEST_PG_URL (bash .ci/run starts one and sets it)"
        ),
    ),
]


def _pg_database(name: str) -> str:
    """A new, empty database on the test server, named after the test."""
    url = make_url(PG_URL)
    db = f"{url.database}_{name}"[:63]
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{db}"'))
    admin.dispose()
    return url.set(database=db).render_as_string(hide_password=False)


@pytest.fixture(params=BACKENDS)
def new_url(request, tmp_path):
    """Factory of empty databases of the test's backend: new_url("a"), new_url("b")."""

    def make(name: str = "a") -> str:
        if request.param == "sqlite":
            return f"sqlite:///{tmp_path / f'{name}.db'}"
        # a database per test and parameter set: the parameters of one test may run at once on xdist workers
        test = request.node.name.split("[")[0][5:30]
        digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
        return _pg_database(f"{test}_{digest}_{name}".lower())

    make.backend = request.param
    return make


@pytest.fixture
def stores():
    opened: list[Store] = []

    def open_store(url: str, **kw) -> Store:
        opened.append(Store(url, **kw))
        return opened[-1]

    yield open_store
    for s in opened:
        s.close()


def make_run(steps: int = 4, nodes: int = 3, method: str = "pld", seed: int = 0, status: str = "complete") -> RunTrace:
    """A synthetic trace with every kind of value a column holds: None, inf, unicode, quotes, newlines."""
    out: list[StepTrace] = []
    emitted_all: list[int] = []
    for i in range(steps):
        ns = []
        for j in range(nodes):
            root = j == 0
            ns.append(
                NodeTrace(
                    step=i,
                    cache_pos=7 + 2 * i,
                    node=j,
                    parent=j - 1,
                    depth=j,
                    token_id=10 + j + seed,
                    token_text=["", " the", 'é\n"q",x'][j % 3],
                    source="root" if root else ("context", "alignment")[j % 2],
                    decision="accepted" if j < nodes - 1 else "rejected",
                    reason="p ≥ δ" if j else "root",
                    p=None if root else 1 / (j + 2 + seed),
                    entropy=None if root else 0.1 * j + seed,
                    max_p=None if root else 0.9,
                    p_eos=None if root else 1e-9,
                    rank=None if root else j - 1,
                    logit_gap=None if root else (math.inf if j == 2 else 0.25),
                    threshold=None if root else 0.1,
                    draft_p=0.5 if j == 1 else None,
                    correction_id=None,
                    mem_count=3 if j == 1 else None,
                )
            )
        emitted = [20 + i, 21 + i]
        emitted_all += emitted
        out.append(
            StepTrace(
                index=i,
                cache_pos=7 + 2 * i,
                tree_size=nodes - 1,
                accepted=1,
                emitted=emitted,
                draft_ms=0.125 * i,
                forward_ms=1.5,
                verify_ms=0.2,
                bookkeeping_ms=1 / 3,
                nodes=ns,
            )
        )
    return RunTrace(
        method=method,
        params={"max_new_tokens": 2 * steps, "delta": 0.1 + seed},
        model="tiny/model",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt='Say "hi",\nthen stop.',
        prompt_ids=[1, 2, 3],
        context="a document, with commas",
        output_text="hi there",
        output_ids=emitted_all,
        steps=out,
        prefill_seconds=0.01,
        decode_seconds=0.5 + seed,
        status=status,
        stop_reason="max_new_tokens",
        model_fingerprint="fp-1",
    )


# ---------------------------------------------------------------- round trips and queries


def test_save_load_query_delete(new_url, stores):
    store = stores(new_url())
    a = make_run(method="pld")
    b = make_run(steps=6, method="greedy", seed=1)
    b.draft_model = "tiny/draft"
    ida = store.save_run(a, tags=["x", "y"])
    idb = store.save_run(b, tags=["y"])
    loaded = store.load_run(ida)
    assert loaded.trace == a  # every field, step and node, floats exact, inf and None kept
    assert loaded.tags == ["x", "y"] and loaded.metrics["steps"] == 4 and loaded.trace.status == "complete"
    assert store.load_step(idb, 5) == b.steps[5]
    assert [r.id for r in store.list_runs()] == [idb, ida]
    assert [r.id for r in store.list_runs(method="pld")] == [ida]
    assert [r.id for r in store.list_runs(model="tiny/draft")] == [idb]
    assert [r.id for r in store.list_runs(tag="x")] == [ida]
    assert [r.id for r in store.list_runs(tag="y", limit=1)] == [idb]
    assert store.list_runs(since=datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(days=1)) == []
    assert len(store.list_runs(until=datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(days=1))) == 2
    assert store.delete_runs([ida]) == 1
    with pytest.raises(RunNotFoundError, match=f"no run {ida}"):
        store.load_run(ida)
    with pytest.raises(RunNotFoundError, match="has no step 9"):
        store.load_step(idb, 9)
    assert store.load_run(idb).trace == b
    assert store.save_run(make_run()) > idb  # ids are never reused


def test_compare_runs():
    a, b = make_run(steps=3), make_run(steps=3)
    assert compare_traces(a, b)["identical"]
    b.output_ids = a.output_ids[:3] + [99] + a.output_ids[4:]
    c = compare_traces(a, b)
    assert (c["first_divergence"], c["token_a"], c["token_b"], c["step_a"], c["step_b"]) == (
        3,
        a.output_ids[3],
        99,
        1,
        1,
    )
    assert (c["text_a"], c["text_b"]) == (f"⟨{a.output_ids[3]}⟩", "⟨99⟩")  # no node record names these tokens
    b.output_ids[3] = 11
    assert compare_traces(a, b)["text_b"] == " the"
    assert c["lengths_a"] == [2, 2, 2]
    short = make_run(steps=2)
    c = compare_traces(a, short)
    # the shorter output ends first: it has no token and no step there
    assert (c["first_divergence"], c["step_a"], c["step_b"], c["token_b"]) == (4, 2, None, None)


def test_the_store_does_not_import_torch_or_gradio():
    # The CLI's store commands and the migrations stay light; core.models (torch) is only imported
    # lazily when the default location is needed.
    code = "import sys, workbench.store; print(sorted({'torch', 'gradio', 'plotly'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tiny_model_traces_round_trip(new_url, stores, tiny):
    """Real engine traces (a tiny random Llama): stored, loaded and compared."""
    from core.methods import run_method

    store = stores(new_url())
    prompt = [5, 9, 14, 5, 9, 22, 31, 5, 9, 14, 5, 9]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 24})
    pld = run_method("pld", tiny, prompt, {"max_new_tokens": 24})
    ids = [store.save_run(r) for r in (greedy, pld)]
    assert [store.load_run(i).trace for i in ids] == [greedy, pld]
    cmp = store.compare(*ids)
    assert cmp["identical"]  # PLD is lossless
    assert cmp["lengths_b"] == pld.accept_lengths and sum(cmp["lengths_b"]) == 24


# ---------------------------------------------------------------- atomic runs


def test_recording_streams_and_marks_status(new_url, stores):
    url = new_url()
    store, reader = stores(url), stores(url)
    earlier = store.save_run(make_run(seed=3))
    run = make_run(steps=5)
    with store.recording(run, tags=["live"], flush_seconds=0) as rec:
        for s in run.steps[:3]:
            rec.add_step(s)
        seen = reader.load_run(rec.run_id)
        assert seen.trace.status == "running" and len(seen.trace.steps) == 3  # streamed, for a live view
        assert [r.id for r in reader.list_runs(status="complete")] == [earlier]
        rec.finish(run)
    done = reader.load_run(rec.run_id)
    assert done.trace == run and done.trace.status == "complete" and done.tags == ["live"]

    with pytest.raises(RuntimeError, match="boom"):
        with store.recording(make_run(steps=2), flush_seconds=0) as rec:
            rec.add_step(run.steps[0])
            raise RuntimeError("boom")
    failed = reader.load_run(rec.run_id).trace
    assert failed.status == "failed" and "RuntimeError: boom" in failed.error and len(failed.steps) == 1

    with pytest.raises(KeyboardInterrupt):
        with store.recording(make_run(steps=2), flush_seconds=60) as rec:
            rec.add_step(run.steps[0])  # buffered, written when the run is marked
            raise KeyboardInterrupt
    cancelled = reader.load_run(rec.run_id).trace
    assert cancelled.status == "cancelled" and len(cancelled.steps) == 1
    assert reader.load_run(earlier).trace == make_run(seed=3)


def test_finish_is_all_or_nothing(new_url, stores):
    """A final batch that cannot be written leaves no half of it, and the run is not complete."""
    store = stores(new_url())
    run = make_run(steps=4)
    bad = make_run(steps=4)
    bad.steps[3].nodes[1].token_text = None  # NOT NULL: the insert fails inside the final transaction
    with pytest.raises(Exception):
        with store.recording(run, flush_seconds=0) as rec:
            rec.add_step(run.steps[0])
            rec.finish(bad)
    stored = store.load_run(rec.run_id).trace
    assert stored.status == "failed" and [s.index for s in stored.steps] == [0]


KILLED_WRITER = """
import sys, time
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from test_store import make_run
from workbench.store import Store
store = Store({url!r})
run = make_run(steps=1000, nodes=4)
with store.recording(run, flush_seconds=0) as rec:
    for step in run.steps:
        rec.add_step(step)
        print(step.index, flush=True)
        time.sleep(0.02)
"""


def test_killed_writer_leaves_earlier_runs_and_is_marked(new_url, stores):
    url = new_url()
    store = stores(url)
    before = make_run(seed=2)
    earlier = store.save_run(before)
    code = KILLED_WRITER.format(root=str(ROOT), tests=str(ROOT / "tests"), url=url)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(6):
            assert proc.stdout.readline().strip(), "the writer died before writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    after = stores(url)  # a new Store notices the dead writer
    assert after.load_run(earlier).trace == before
    killed_id = max(r.id for r in after.list_runs())
    killed = after.load_run(killed_id).trace
    assert killed.status == "failed" and "killed" in killed.error
    assert len(killed.steps) >= 6 and all(len(s.nodes) == 4 for s in killed.steps)
    assert [s.index for s in killed.steps] == list(range(len(killed.steps)))


# ---------------------------------------------------------------- damaged, locked, versioned


def test_corrupt_file_is_refused_and_left_alone(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database\x00" * 100)
    before = junk.read_bytes()
    with pytest.raises(CorruptStoreError, match=f"{junk}.*not a SQLite database.*left untouched"):
        Store(str(junk))
    assert junk.read_bytes() == before

    damaged = tmp_path / "damaged.db"
    with Store(str(damaged)) as s:
        run_id = s.save_run(make_run(steps=200, nodes=8))
    data = bytearray(damaged.read_bytes())
    data[8192:] = b"\xa5" * (len(data) - 8192)  # keep the header page, wreck the tables
    damaged.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(f"{damaged}{suffix}").unlink(missing_ok=True)
    with pytest.raises(CorruptStoreError, match="damaged.*left as it is"):
        with Store(str(damaged)) as s:
            s.load_run(run_id)
    assert damaged.read_bytes() == bytes(data)


def test_locked_database_waits_then_errors(new_url, stores):
    url = new_url()
    store = stores(url, timeout=0.5)
    store.save_run(make_run())
    if new_url.backend == "sqlite":
        holder = sqlite3.connect(make_url(url).database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        release = lambda: (holder.rollback(), holder.close())
    else:
        engine = create_engine(url)
        conn = engine.connect()
        conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
        release = lambda: (conn.rollback(), conn.close(), engine.dispose())
    t0 = time.perf_counter()
    try:
        with pytest.raises(StoreLockedError, match="locked by another writer.*0.5 s"):
            store.save_run(make_run())
        assert time.perf_counter() - t0 >= 0.4  # it waited for the lock before giving up
    finally:
        release()
    assert store.save_run(make_run()) and len(store.list_runs()) == 2


def test_schema_versions(new_url, stores):
    url = new_url()
    store = stores(url)
    assert store.schema_revision() == "0002"

    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from workbench.store import Base

    with store.engine.connect() as conn:  # the migration builds exactly the tables the models describe
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00d'"))
        conn.commit()
    with pytest.raises(SchemaVersionError, match="newer spec-workbench.*f00d"):
        Store(url)

    other = new_url("other")
    engine = create_engine(other)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(SchemaVersionError, match="not a trace store"):
        Store(other)


# ---------------------------------------------------------------- CSV


def test_csv_round_trip_is_byte_identical(new_url, stores, tmp_path):
    import pandas as pd

    store = stores(new_url("a"))
    runs = [make_run(steps=3), make_run(steps=5, seed=1, method="greedy")]
    ids = [store.save_run(r, tags=["t"]) for r in runs]
    first, second, third = tmp_path / "1", tmp_path / "2", tmp_path / "3"
    store.export_csv(ids, first)
    copy = stores(new_url("b"))
    assert copy.import_csv(first) == ids
    assert [copy.load_run(i).trace for i in ids] == runs
    copy.export_csv(ids, second)
    for name in ("runs", "steps", "nodes"):
        assert (first / f"{name}.csv").read_bytes() == (second / f"{name}.csv").read_bytes()
    other = stores(f"sqlite:///{tmp_path / 'other.db'}")  # and across backends
    other.import_csv(second)
    other.export_csv(None, third)
    assert all((first / n).read_bytes() == (third / n).read_bytes() for n in ("runs.csv", "steps.csv", "nodes.csv"))

    nodes = pd.read_csv(first / "nodes.csv", keep_default_na=False, na_values=[""])
    assert len(nodes) == 3 * 3 + 5 * 3 and {"run_id", "step", "node", "parent", "p", "decision"} <= set(nodes.columns)
    assert nodes.logit_gap.max() == math.inf
    runs_df = pd.read_csv(first / "runs.csv")
    assert list(runs_df.run_id) == ids and json.loads(runs_df.params[0]) == runs[0].params

    with pytest.raises(Exception, match="already in"):
        copy.import_csv(first)
    renumbered = copy.import_csv(first, renumber=True)
    assert renumbered == [ids[-1] + 1, ids[-1] + 2] and copy.load_run(renumbered[1]).trace == runs[1]
    assert copy.save_run(make_run()) == ids[-1] + 3  # the id sequence moved past the imported ids


def _edit(path: Path, row: int, column: str, value: str) -> None:
    import csv

    rows = list(csv.reader(path.open(encoding="utf-8", newline="")))
    rows[row - 1][rows[0].index(column)] = value
    with path.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


@pytest.mark.parametrize(
    "file,row,column,value,message",
    [
        ("nodes.csv", 7, "p", "abc", "nodes.csv row 7, column 'p': is not a number"),
        ("nodes.csv", 7, "decision", "maybe", "nodes.csv row 7, column 'decision': must be one of"),
        ("nodes.csv", 7, "step", "9", "nodes.csv row 7, column 'step': run 1 has no step 9"),
        ("steps.csv", 3, "emitted", "[1,", "steps.csv row 3, column 'emitted'"),
        ("steps.csv", 3, "accepted", "", "steps.csv row 3, column 'accepted': is empty but required"),
        ("runs.csv", 2, "status", "done", "runs.csv row 2, column 'status': must be one of"),
        ("runs.csv", 2, "created", "yesterday", "runs.csv row 2, column 'created'"),
    ],
)
def test_malformed_csv_is_refused_and_nothing_imported(new_url, stores, tmp_path, file, row, column, value, message):
    store = stores(new_url("a"))
    store.save_run(make_run(steps=2))
    store.export_csv(None, tmp_path)
    _edit(tmp_path / file, row, column, value)
    target = stores(new_url("b"))
    with pytest.raises(CsvFormatError, match=message.replace("[", r"\[")):
        target.import_csv(tmp_path)
    assert target.list_runs() == []


def test_csv_header_and_files_are_checked(tmp_path, stores):
    store = stores(f"sqlite:///{tmp_path / 'a.db'}")
    store.save_run(make_run())
    store.export_csv(None, tmp_path / "x")
    nodes = tmp_path / "x" / "nodes.csv"
    nodes.write_text(nodes.read_text().replace("logit_gap", "gap", 1))
    with pytest.raises(
        CsvFormatError, match=r"nodes.csv: the header.*missing columns \['logit_gap'\].*unknown columns \['gap'\]"
    ):
        store.import_csv(tmp_path / "x")
    (tmp_path / "x" / "steps.csv").unlink()
    with pytest.raises(CsvFormatError, match="steps.csv is missing"):
        store.import_csv(tmp_path / "x")


# ---------------------------------------------------------------- concurrency


def test_concurrent_writers_lose_nothing(new_url, stores):
    url = new_url()
    shared = stores(url)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            own = Store(url)  # half the runs through a shared Store, half through each thread's own engine
            for k in range(4):
                run = make_run(steps=6, nodes=5, seed=worker)
                target = shared if k % 2 else own
                if k == 3:
                    with target.recording(run, tags=[f"w{worker}"], flush_seconds=0) as rec:
                        for s in run.steps:
                            rec.add_step(s)
                        rec.finish(run)
                else:
                    target.save_run(run, tags=[f"w{worker}"])
            own.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    runs = shared.list_runs(limit=None)
    assert len(runs) == 16 and all(r.status == "complete" for r in runs)
    for w in range(4):
        mine = shared.list_runs(tag=f"w{w}")
        assert len(mine) == 4
        assert all(shared.load_run(r.id).trace == make_run(steps=6, nodes=5, seed=w) for r in mine)


# ---------------------------------------------------------------- configuration and CLI


def test_unreachable_server_is_named():
    from workbench.store import StoreUnavailableError

    with pytest.raises(
        StoreUnavailableError, match=r"cannot use the trace store postgresql\+psycopg://nobody:\*\*\*@127.0.0.1:9/x"
    ):
        Store("postgresql+psycopg://nobody:secret@127.0.0.1:9/x")


def test_db_location(monkeypatch, tmp_path):
    monkeypatch.delenv("WORKBENCH_DB", raising=False)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    assert resolve_url() == f"sqlite:///{tmp_path / 'home' / 'traces.db'}"
    with Store() as s:  # created where it is documented
        s.save_run(make_run())
    assert (tmp_path / "home" / "traces.db").exists()
    monkeypatch.setenv("WORKBENCH_DB", "postgresql+psycopg://u@localhost/x")
    assert resolve_url() == "postgresql+psycopg://u@localhost/x"
    assert (
        resolve_url(str(tmp_path / "t.db")) == f"sqlite:///{tmp_path / 't.db'}"
    )  # --db wins; a bare path is a SQLite file


def test_cli_store_commands(new_url, stores, tmp_path, capsys):
    url = new_url()
    store = stores(url)
    a, b = make_run(steps=3), make_run(steps=3, method="greedy")
    b.output_ids = a.output_ids[:2] + [11, 78]  # 11: node 1's token, " the" in its records
    fitted = make_run(steps=2, method="aasd")
    fitted.params["fitted"] = 1
    ida, idb = store.save_run(a, tags=["cli"]), store.save_run(b)
    store.save_run(fitted)

    def run(*argv) -> str:
        capsys.readouterr()
        assert main([*argv, "--db", url]) == 0
        return capsys.readouterr().out

    listing = run("store", "list")
    assert f"{ida:>6}" in listing and "pld" in listing and "greedy" in listing
    assert "aasd[auto]" in listing  # named as asked for, as the app's runs list names it
    assert [r["id"] for r in json.loads(run("store", "list", "--tag", "cli", "--json"))] == [ida]
    assert "3 steps" in run("store", "show", str(ida))
    step = json.loads(run("store", "show", str(ida), "--step", "1", "--json"))
    assert step["index"] == 1 and len(step["nodes"]) == 3
    assert "rejected" in run("store", "show", str(ida), "--step", "1")
    cmp = json.loads(run("store", "compare", str(ida), str(idb), "--json"))
    assert cmp["first_divergence"] == 2 and cmp["step_a"] == 1
    said = run("store", "compare", str(ida), str(idb))
    # tokens by their text where the step's records name them (whitespace made visible), ids beside
    assert "first divergence at token 2" in said and "'␣the' (id 11)" in said and "'⟨21⟩' (id 21)" in said
    # a run Stopped while its tokens equalled the other's is no divergence (core.stats.run_divergence)
    stopped = make_run(steps=1)
    stopped.output_ids, stopped.status = a.output_ids[:2], "cancelled"
    idc = store.save_run(stopped)
    said = run("store", "compare", str(ida), str(idc))
    assert "first divergence" not in said and "agree on all 2 tokens of the shorter, which was cut short" in said, said
    store.delete_runs([idc])
    run("store", "export", "--run", str(ida), "--run", str(idb), "--out", str(tmp_path / "csv"))
    assert "deleted 2 runs" in run("store", "delete", str(ida), str(idb))
    assert "imported 2 runs" in run("store", "import", str(tmp_path / "csv"))
    assert store.load_run(ida).trace == a

    assert main(["store", "show", "999", "--db", url]) == 2
    assert "no run 999" in capsys.readouterr().err
    assert main(["store", "export", "--out", str(tmp_path), "--db", url]) == 2


@pytest.mark.real_model
def test_generate_and_bench_store_real_runs(smollm2, tmp_path, capsys):
    """SmolLM2 through the CLI: generate stores its run (run_id in --json), --no-store does not, bench stores each run."""
    db = str(tmp_path / "t.db")
    common = ["--device", "cpu", "--dtype", "float32", "--max-new-tokens", "16", "--db", db]
    assert (
        main(
            [
                "generate",
                "--method",
                "pld",
                "--prompt",
                "Repeat: the quick brown fox jumps over the lazy dog.",
                "--json",
                "--tag",
                "smoke",
                *common,
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    with Store(db) as store:
        stored = store.load_run(out["run_id"])
        assert stored.trace.output_ids == out["token_ids"] and stored.trace.status == "complete"
        assert stored.trace.accept_lengths == out["accept_lengths"] and stored.tags == ["smoke"]
        assert stored.trace.model_fingerprint == smollm2.fingerprint
        assert main(["generate", "--method", "greedy", "--prompt", "Hi", "--json", "--no-store", *common]) == 0
        assert json.loads(capsys.readouterr().out)["run_id"] is None
        assert (
            main(
                [
                    "bench",
                    "--data",
                    str(ROOT / "assets" / "samples.jsonl"),
                    "--methods",
                    "pld",
                    "--categories",
                    "qa",
                    "--limit",
                    "1",
                    "--out",
                    str(tmp_path / "b.json"),
                    *common,
                ]
            )
            == 0
        )
        rows = json.loads((tmp_path / "b.json").read_text())["tasks"]
        bench_runs = store.list_runs(tag="bench", limit=None)
        assert sorted(r["run_id"] for r in rows) == sorted(r.id for r in bench_runs) and len(rows) >= 2
        for row in rows:
            assert store.load_run(row["run_id"]).trace.output_ids == row["token_ids"]
