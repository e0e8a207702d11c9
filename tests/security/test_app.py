"""The store, the app, the models and the CLI under hostile or careless input (issue 24, items 4-12):
each case here failed (a traceback, a hang, a changed file or a leak) before it was fixed."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.errors import InvalidInputError, WorkbenchError
from tests.test_store import make_run

ROOT = Path(__file__).resolve().parents[2]
real_model = pytest.mark.real_model


def cli(*argv: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The command line in a subprocess: its exit code and output, never a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- 7: methods per request, disconnects


def test_more_methods_than_columns_is_a_clear_error():
    from workbench import service

    with pytest.raises(InvalidInputError, match="at most 4"):
        service.check_methods(["greedy", "pld", "aasd", "casd", "aasd-fixed"], "smollm2-135m", None)
    with pytest.raises(InvalidInputError, match="list of method names"):
        service.check_methods("greedy", "smollm2-135m", None)


@real_model
def test_more_than_four_methods_through_the_api_is_a_message(app):
    _, client = app
    out = client.predict(
        api_name="/compare",
        model_name="smollm2-135m",
        max_new_tokens=2,
        method_list=["greedy", "pld", "aasd", "casd", "aasd-fixed"],
    )
    assert out[0].startswith("**⚠") and "at most 4" in out[0], out[0]


CLIENT = """
import sys, time
from gradio_client import Client
job = Client(sys.argv[1], verbose=False).submit(api_name="/compare", model_name="smollm2-135m", method_list=["greedy"],
    prompt_text="Write the numbers from 1 to 1000, one per line.", context_text="", max_new_tokens=1024)
while len(job.outputs()) < 3:  # loading, then the first streamed updates
    time.sleep(0.05)
print("STREAMING", flush=True)
time.sleep(600)
"""


@real_model
def test_a_client_that_disconnects_cancels_its_generation_and_frees_the_model(app):
    demo, client = app
    if hasattr(demo, "pool"):
        demo.pool.idle_cancel = 2.0
    before = {r.id for r in demo.store.list_runs(limit=None)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENT, demo.local_url], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout.readline().strip() == "STREAMING"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the client vanishes: its connection drops mid-stream
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = [r for r in demo.store.list_runs(limit=None) if r.id not in before]
        if new and all(r.status != "running" for r in new):
            break
        time.sleep(0.5)
    assert len(new) == 1 and new[0].status == "cancelled", [(r.id, r.status) for r in new]
    assert new[0].metrics["tokens"] < 1024
    # the model's slot was given back: the next comparison runs at once
    status = client.predict(api_name="/compare", model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=2)[0]
    assert status.startswith("done"), status


# ---------------------------------------------------------------- 4: per-model load locks


def test_a_cached_model_never_waits_behind_another_models_load(tmp_path, monkeypatch):
    import transformers

    from core import models

    cached, slow = tmp_path / "cached", tmp_path / "slow"
    for d in (cached, slow):
        d.mkdir()
        (d / "config.json").write_text("{}")
    sentinel = object()
    monkeypatch.setitem(models._LOADED, (str(cached), "cpu", "torch.float32"), sentinel)
    release = threading.Event()

    def stuck(source, **kw):
        release.wait(30)
        raise OSError("no model here")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", stuck)
    loader = threading.Thread(
        target=lambda: pytest.raises(WorkbenchError, models.load_model, str(slow), "cpu", "float32")
    )
    loader.start()
    time.sleep(0.2)  # the slow load holds its lock now
    got = []
    t = threading.Thread(target=lambda: got.append(models.load_model(str(cached), "cpu", "float32")))
    t.start()
    t.join(2)
    release.set()
    loader.join(5)
    assert got == [sentinel], "the cached model waited behind another model's load"


# ---------------------------------------------------------------- 6: CSV field limit and formula cells


def test_csv_cells_over_the_csv_modules_limit_import(tmp_path):
    from workbench.store import Store

    run = make_run(steps=2)
    run.prompt = "lighthouse " * 20_000  # 220,000 characters: over csv's default 131,072
    with Store(str(tmp_path / "a.db")) as a, Store(str(tmp_path / "b.db")) as b:
        rid = a.save_run(run)
        a.export_csv([rid], tmp_path / "out")
        (new,) = b.import_csv(tmp_path / "out")
        assert b.load_run(new).trace.prompt == run.prompt


@pytest.mark.parametrize(
    "text",
    [
        '=HYPERLINK("http://x","y")',
        "+1+2",
        "-2+3",
        "@SUM(A1)",
        "\tx",
        "\rx",
        "'=already quoted",
        "''",
        "'plain",
        "plain",
    ],
)
def test_formula_cells_are_escaped_on_export_and_restored_on_import(tmp_path, text):
    from workbench.store import Store

    run = make_run(steps=1)
    run.prompt = run.output_text = text
    with Store(str(tmp_path / "a.db")) as a, Store(str(tmp_path / "b.db")) as b:
        rid = a.save_run(run, tags=[text])
        a.export_csv([rid], tmp_path / "out")
        with (tmp_path / "out" / "runs.csv").open(encoding="utf-8", newline="") as f:
            row = next(csv.DictReader(f))
        for col in ("prompt", "output_text"):
            assert not row[col].startswith(("=", "+", "-", "@", "\t", "\r")), row[col]
        (new,) = b.import_csv(tmp_path / "out")
        back = b.load_run(new)
        assert back.trace.prompt == text and back.trace.output_text == text and back.tags == [text]


# ---------------------------------------------------------------- 8: another application's SQLite file


def test_a_foreign_sqlite_file_is_refused_and_left_unmodified(tmp_path):
    from workbench.store import SchemaVersionError, Store

    path = tmp_path / "other_app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
        conn.execute("INSERT INTO contacts VALUES ('ada')")
    conn.close()
    before = digest(path)
    with pytest.raises(SchemaVersionError, match="not a trace store"):
        Store(str(path))
    assert digest(path) == before
    assert path.read_bytes()[18:20] == b"\x01\x01"  # still a rollback-journal file, not switched to WAL
    assert not Path(f"{path}-wal").exists()


# ---------------------------------------------------------------- 9: a draft with a larger embedding


def test_a_draft_with_more_output_rows_than_the_target_is_refused():
    from core.models import VocabularyMismatchError, check_pair

    tok = SimpleNamespace(get_vocab=lambda: {"a": 0, "b": 1})
    target = SimpleNamespace(name="t", tokenizer=tok, vocab_size=96)
    draft = SimpleNamespace(name="d", tokenizer=tok, vocab_size=128)
    with pytest.raises(VocabularyMismatchError, match="128 output rows"):
        check_pair(target, draft)
    check_pair(draft, target)  # a smaller draft proposes only ids the target scores


# ---------------------------------------------------------------- 10: clear errors, not tracebacks


def gguf_cases() -> dict[str, bytes]:
    return {
        "empty": b"",
        "text": b"this is not a model\n" * 4,
        "truncated": b"GGUF" + struct.pack("<IQQ", 3, 5, 100),
        "bad-version": b"GGUF" + struct.pack("<I", 99) + bytes(40),
        "huge-key": b"GGUF" + struct.pack("<IQQQ", 3, 1, 1, 2**40) + b"ab",
    }


@pytest.mark.parametrize("kind", list(gguf_cases()))
def test_a_corrupt_gguf_file_is_a_clear_error(tmp_path, kind):
    from core.models import load_model

    path = tmp_path / f"{kind}.gguf"
    path.write_bytes(gguf_cases()[kind])
    with pytest.raises(WorkbenchError) as e:
        load_model(str(path), device="cpu", dtype="float32", cache=False)
    assert "GGUF" in str(e.value) or "could not read" in str(e.value)
    assert "not a model\n" not in str(e.value)


@pytest.mark.parametrize("config", [None, '{"foo": 1}', "{not json"])
def test_a_folder_that_is_not_a_model_is_a_clear_error(tmp_path, config):
    from core.models import load_model

    folder = tmp_path / "not-a-model"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config)
    with pytest.raises(WorkbenchError):
        load_model(str(folder), device="cpu", dtype="float32", cache=False)


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://u:secret@localhost/db", "supports SQLite files and PostgreSQL"),
        ("nosuchdb://x/y", "supports SQLite files and PostgreSQL"),
        ("oracle+cx_oracle://u:secret@h/db", "supports SQLite files and PostgreSQL"),
    ],
)
def test_unsupported_database_urls_are_clear_errors(url, message):
    from workbench.store import Store

    with pytest.raises(InvalidInputError, match=message) as e:
        Store(url)
    assert "secret" not in str(e.value)


def test_a_folder_as_the_store_is_a_clear_error(tmp_path):
    p = cli("store", "list", "--db", str(tmp_path))
    assert p.returncode == 2 and "is a folder" in p.stderr


def bad_files(tmp_path: Path) -> dict[str, Path]:
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes('{"id": "1", "task": "qa", "input": "caf\xe9"}\n'.encode("latin-1"))
    return {"latin": latin, "folder": tmp_path, "missing": tmp_path / "missing.txt"}


@pytest.mark.parametrize("option", ["--prompt-file", "--context-file"])
@pytest.mark.parametrize(
    "which, message", [("latin", "is not UTF-8"), ("folder", "is a folder"), ("missing", "not found")]
)
def test_bad_prompt_and_context_files_are_clear_errors(tmp_path, option, which, message):
    p = cli("generate", "--no-store", "--prompt", "hi", option, str(bad_files(tmp_path)[which]))
    assert p.returncode == 2 and message in p.stderr, p.stderr


@pytest.mark.parametrize("which, message", [("latin", "is not UTF-8"), ("folder", "is a folder")])
def test_bad_task_files_are_clear_errors(tmp_path, which, message):
    from workbench.evaluation.tasks import load_tasks

    with pytest.raises(InvalidInputError, match=message):
        load_tasks(bad_files(tmp_path)[which])
    p = cli("bench", "--no-store", "--data", str(bad_files(tmp_path)[which]))
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_a_deeply_nested_task_line_is_a_clear_error(tmp_path):
    from workbench.evaluation.tasks import load_tasks

    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InvalidInputError):
        load_tasks(path)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_parameters_are_refused_by_the_cli(value):
    p = cli("generate", "--no-store", "--prompt", "hi", f"--temperature={value}")
    assert p.returncode == 2 and "not a finite number" in p.stderr, p.stderr


def test_non_finite_parameters_are_refused_by_the_app_service():
    from workbench import service

    with pytest.raises(InvalidInputError, match="finite"):
        service.method_params("greedy", {"temperature": float("nan")})


def test_an_empty_stop_string_is_refused():
    p = cli("generate", "--no-store", "--prompt", "hi", "--stop", "")
    assert p.returncode == 2 and "--stop" in p.stderr, p.stderr


def test_store_export_onto_an_existing_file_is_a_clear_error(tmp_path):
    from workbench.store import Store

    db = str(tmp_path / "t.db")
    with Store(db) as s:
        rid = s.save_run(make_run(steps=1))
    target = tmp_path / "taken.txt"
    target.write_text("keep me")
    p = cli("store", "export", "--db", db, "--run", str(rid), "--out", str(target))
    assert p.returncode == 2 and "is a file" in p.stderr and target.read_text() == "keep me"


def exported(tmp_path: Path) -> Path:
    from workbench.store import Store

    with Store(str(tmp_path / "src.db")) as s:
        rid = s.save_run(make_run(steps=2))
        s.export_csv([rid], tmp_path / "out")
    return tmp_path / "out"


def set_cell(path: Path, column: str, value: str, row: int = 1) -> None:
    rows = list(csv.reader(path.open(encoding="utf-8", newline="")))
    rows[row][rows[0].index(column)] = value
    with path.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


@pytest.mark.parametrize(
    "file, column, value, message",
    [
        ("runs.csv", "params", "[" * 5000 + "]" * 5000, "nested too deeply"),
        ("runs.csv", "params", json.dumps({"a": 2**70}), "64-bit"),
        ("runs.csv", "run_id", str(2**70), "64-bit"),
        ("runs.csv", "tags", json.dumps({"a": 1}), "must be a JSON list"),
        ("runs.csv", "tags", json.dumps([{"a": 1}]), "list of strings"),
        ("runs.csv", "prompt_ids", json.dumps(["a"]), "list of integers"),
        ("runs.csv", "prompt_ids", json.dumps([True]), "list of integers"),
        ("runs.csv", "metrics", json.dumps([1]), "must be a JSON object"),
        ("steps.csv", "emitted", json.dumps([1.5]), "list of integers"),
    ],
)
def test_bad_json_and_numbers_on_import_are_clear_errors(tmp_path, file, column, value, message):
    from workbench.store import CsvFormatError, Store

    out = exported(tmp_path)
    set_cell(out / file, column, value)
    with Store(str(tmp_path / "dst.db")) as s:
        with pytest.raises(CsvFormatError, match=message):
            s.import_csv(out)
        assert s.list_runs() == []


def test_import_keeps_the_instant_of_a_timezone_offset(tmp_path):
    from datetime import datetime

    from workbench.store import Store

    out = exported(tmp_path)
    set_cell(out / "runs.csv", "created", "2024-05-01T12:00:00+02:00")
    with Store(str(tmp_path / "dst.db")) as s:
        (rid,) = s.import_csv(out)
        assert s.load_run(rid).created == datetime(2024, 5, 1, 10, 0, 0)  # stored as UTC


def test_an_import_error_never_echoes_the_file_it_read(tmp_path):
    from workbench.store import CsvFormatError, Store

    folder = tmp_path / "secrets"
    folder.mkdir()
    (folder / "runs.csv").write_text("root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\ndaemon:*:19000\n")
    with Store(str(tmp_path / "dst.db")) as s, pytest.raises(CsvFormatError) as e:
        s.import_csv(folder)
    assert "saltsalt" not in str(e.value) and "root" not in str(e.value)
    out = exported(tmp_path)
    set_cell(out / "runs.csv", "created", "s3cr3t-value")
    with Store(str(tmp_path / "dst2.db")) as s, pytest.raises(CsvFormatError) as e:
        s.import_csv(out)
    assert "s3cr3t" not in str(e.value)


def test_a_template_with_a_positional_field_is_a_clear_error(tmp_path):
    from workbench.evaluation.tasks import load_tasks

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "1", "task": "qa", "input": "x", "template": "{0} {input}"}) + "\n")
    with pytest.raises(InvalidInputError, match=r"\{0\}"):
        load_tasks(path)


def test_a_store_that_cannot_be_written_does_not_abort_the_generation(tmp_path, tiny):
    """Locked by another writer while a generation records: the steps wait, the run finishes, and once the
    lock is gone the final write stores every step."""
    from core.methods import run_method
    from workbench.store import Store

    with Store(str(tmp_path / "t.db"), timeout=0.1, flush_seconds=0.0) as store:
        rec = store.recording(make_run(steps=0))
        rec.__enter__()
        locker = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")  # another writer holds the lock from the first step on
        try:
            run = run_method("pld", tiny, list(range(2, 40)) * 2, {"max_new_tokens": 12}, on_step=rec.add_step)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        assert run.status == "complete" and len(run.output_ids) == 12  # the generation was not aborted
        assert rec.write_error is not None
        rec.finish(run)
        rec.__exit__(None, None, None)
        stored = store.load_run(rec.run_id)
        assert stored.trace.status == "complete" and len(stored.trace.steps) == len(run.steps)


def test_bench_refuses_an_unwritable_out_before_running(tmp_path):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "1", "task": "qa", "input": "x"}) + "\n")
    p = cli(
        "bench", "--no-store", "--data", str(tasks), "--model", str(tmp_path / "no-model-here"), "--out", str(tmp_path)
    )
    assert p.returncode == 2 and "is a folder" in p.stderr, p.stderr  # refused before any model loads


# ---------------------------------------------------------------- 11: variants on generate, checked before loading


def test_generate_takes_variant_syntax_and_checks_it_before_loading(tmp_path):
    missing = str(tmp_path / "no-model-here")
    bad = cli("generate", "--no-store", "--prompt", "hi", "--model", missing, "--method", "aasd[align_graft=7]")
    assert bad.returncode == 2 and "align_graft" in bad.stderr and "model folder not found" not in bad.stderr, (
        bad.stderr
    )
    good = cli("generate", "--no-store", "--prompt", "hi", "--model", missing, "--method", "aasd[align_graft=1]")
    assert good.returncode == 2 and "model folder not found" in good.stderr, good.stderr  # parsed; then the model
    bench = cli(
        "bench",
        "--no-store",
        "--data",
        str(ROOT / "assets" / "samples.jsonl"),
        "--model",
        missing,
        "--methods",
        "greedy,aasd[align_graft=7]",
    )
    assert bench.returncode == 2 and "align_graft" in bench.stderr, bench.stderr


@real_model
@pytest.mark.slow
def test_generate_runs_a_variant(smollm2):
    p = cli(
        "generate",
        "--no-store",
        "--json",
        "--prompt",
        "Say hi.",
        "--method",
        "aasd[align_graft=1]",
        "--max-new-tokens",
        "3",
        "--device",
        "cpu",
        "--dtype",
        "float32",
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["method"] == "aasd"


# ---------------------------------------------------------------- 12: read-only stores, leaks of server paths


def _list_as_nobody(db: str, out) -> None:
    """In a forked child: drop to an unprivileged user (root ignores file modes), then list the store."""
    try:
        os.setgid(65534)
        os.setuid(65534)
        from workbench.store import Store

        with Store(db) as s:
            out.send(("ok", [r.method for r in s.list_runs()]))
    except BaseException as e:  # noqa: BLE001 - report whatever happened to the parent
        out.send(("error", f"{type(e).__name__}: {e}"))


def test_a_read_only_store_can_be_listed(tmp_path):
    import multiprocessing

    from workbench.store import Store

    if os.geteuid() != 0:
        pytest.skip("needs root, to list the store as an unprivileged user")
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "t.db"
    with Store(str(db)) as s:  # (also imports what the child needs before it loses access to the interpreter's files)
        s.save_run(make_run(steps=1))
        s.list_runs()
    with sqlite3.connect(db) as conn:  # how a store copied off another machine arrives: no WAL files beside it
        conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    os.chmod(db, 0o444)
    os.chmod(folder, 0o555)
    for p in (tmp_path, *tmp_path.parents):
        os.chmod(p, os.stat(p).st_mode | 0o005)
        if p == Path(p.anchor) or str(p) == "/tmp":
            break
    before = digest(db)
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_list_as_nobody, args=(str(db), send))
    child.start()
    child.join(60)
    assert recv.poll(1), "the child said nothing"
    kind, value = recv.recv()
    assert kind == "ok" and value == ["pld"], value
    assert digest(db) == before


def test_ui_errors_do_not_reveal_server_folders():
    from workbench.ui.shared import error_md

    msg = error_md(
        WorkbenchError(
            "could not load '/root/.cache/spec-workbench/models/x': no config.json in /srv/app/models/x/config.json"
        )
    )
    assert "/root/.cache" not in msg and "/srv/app" not in msg and "config.json" in msg


# ---------------------------------------------------------------- 5: runs belong to the session that made them


@real_model
def test_runs_belong_to_the_session_that_made_them_until_shared(app):
    from gradio_client import Client

    demo, alice = app
    bob = Client(demo.local_url, verbose=False)
    status = alice.predict(api_name="/compare", model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=3)[0]
    assert status.startswith("done"), status
    rid = demo.store.list_runs(limit=1)[0].id
    assert "traces.db" not in status  # the server's store path is not shown

    def sees(client) -> bool:
        listed = client.predict("", api_name="/list_runs")
        return rid in [row[0] for row in listed["data"]]

    assert sees(alice) and not sees(bob)
    info = bob.predict(rid, api_name="/load_run")[1]
    assert f"no run {rid}" in info, info
    assert "no run" in bob.predict(rid, 0, api_name="/replay_step")[0]
    path, note = bob.predict([rid], api_name="/export")
    assert path is None and f"no run {rid}" in note
    assert "no run" in bob.predict(rid, "(the run's own)", 0.1, 0.1, 0.1, 0.01, 6, api_name="/rescore")[0]
    assert "no run" in bob.predict(rid, "(the run's own)", 0.1, 0.1, 0.1, 0.01, 6, api_name="/rerun")[2]
    assert "no run" in bob.predict(rid, api_name="/share_run")  # nor can he share it
    assert "is shared" in alice.predict(rid, api_name="/share_run")
    assert sees(bob) and f"loaded run #{rid}" in bob.predict(rid, api_name="/load_run")[1]
    assert "someone else's" in bob.predict(rid, api_name="/share_run")


def test_single_user_mode_sees_every_run(tmp_path):
    from workbench.store import Store
    from workbench.ui.access import Viewer, owner_tag, viewer_of
    from workbench.ui.shared import RunCache, runs_frame

    with Store(str(tmp_path / "t.db")) as store:
        cli_run = store.save_run(make_run(steps=1))  # stored by the command line: no owner
        mine = store.save_run(make_run(steps=1), tags=[owner_tag("session-a")])
        a, b = (viewer_of(SimpleNamespace(session_hash=h), single_user=False) for h in ("session-a", "session-b"))
        assert list(runs_frame(store, viewer=a)["id"]) == [mine] and runs_frame(store, viewer=b).empty
        assert sorted(runs_frame(store, viewer=viewer_of(None, single_user=True))["id"]) == [cli_run, mine]
        cache = RunCache(store)
        cache.get(mine, a)
        with pytest.raises(WorkbenchError, match=f"no run {mine}"):
            cache.get(mine, b)  # not even from the cache the owner filled
        assert cache.get(cli_run, Viewer(None))[0].id == cli_run
