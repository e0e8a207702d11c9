"""The probe's reproductions (issue 30, cases 7-18): bad input on the command line and in the store gets a
clear one-line error and exit code 2, never a traceback, and no file that was not ours changes. Each test
is the reproduction itself; the sandbox cases (5, 6) are in tests/security/test_sandbox_escapes.py.

Cases that could eat the machine's memory on a broken build (/dev/zero, a 100 MB prompt) run the command
in a child process under an address-space limit."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import resource
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import InvalidInputError
from workbench.commands.main import main

ROOT = Path(__file__).resolve().parents[1]


def cli(*argv, env: dict | None = None, monkeypatch=None) -> tuple[int, str]:
    """(exit code, stderr) of `python -m workbench ARGV` run in this process; argparse's exit counts as a code."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


def refused(*argv, says: str) -> str:
    code, err = cli(*argv)
    assert code == 2, (argv, code, err[-2000:])
    assert "Traceback" not in err and says in err, (argv, err[-2000:])
    last = err.strip().splitlines()[-1]
    assert last.startswith(("error:", "workbench")) or "error:" in last, err
    return err


def cli_child(*cases, tmp_path: Path, memory_gib: float = 6, timeout: float = 180) -> tuple[list[tuple[int, str]], int]:
    """([(exit code, stderr) per argv in `cases`], peak resident MiB) of the CLI run on each in turn in one child
    process held to `memory_gib` of address space (a build that reads /dev/zero dies there, not here)."""
    limit = int(memory_gib * (1 << 30))

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    env.setdefault("WORKBENCH_MODELS", str(Path.home() / ".cache" / "spec-workbench" / "models"))
    driver = (
        "import contextlib, io, json, sys, traceback\n"
        "from workbench.commands.main import main\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            code = main(argv)\n"
        "        except SystemExit as e:\n"
        "            code = e.code\n"
        "        except BaseException:\n"
        "            code, _ = 'raised', traceback.print_exc()\n"
        "    print(json.dumps([code, err.getvalue()[-3000:]]), flush=True)\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
    )
    argvs = json.dumps([[str(a) for a in argv] for argv in cases])
    out = subprocess.run(
        [sys.executable, "-c", driver, argvs],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        preexec_fn=cap,
    )
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == len(cases) + 1, (
        out.returncode,
        out.stdout[-2000:],
        out.stderr[-3000:],
    )
    return [tuple(json.loads(line)) for line in lines[:-1]], int(lines[-1]) // 1024


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def task_file(tmp_path: Path, *rows, name="t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def bench_results(tmp_path: Path) -> Path:
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(
            {"methods": {"greedy": {}}, "tasks": [{"id": "a", "method": "greedy", "text": "yes", "category": "qa"}]}
        )
    )
    return path


# ---- 7. a category that is not a string -----------------------------------------------------


def test_7_a_list_as_category_is_a_clear_error(tmp_path):
    data = task_file(tmp_path, {"id": "1", "task": "qa", "input": "hi", "category": ["a"]})
    refused(
        "bench",
        "--data",
        data,
        "--no-store",
        "--methods",
        "greedy",
        says="t.jsonl line 1: 'category' must be a non-empty string",
    )
    for bad in (
        {"id": ["x"], "task": "qa", "input": "hi"},
        {"id": "1", "task": {"a": 1}, "input": "hi"},
        {"id": "1", "task": "qa", "input": "hi", "chat": "no"},
        {"id": "1", "task": "qa", "input": "hi", "max_new_tokens": 10**30},
        {"turns": ["x"], "question_id": {"a": 1}},
        {"input": "q", "context": "c", "dataset": ["hotpotqa"]},
    ):
        refused(
            "score", "--results", bench_results(tmp_path), "--data", task_file(tmp_path, bad), says="t.jsonl line 1:"
        )


# ---- 8. deeply nested JSON ----------------------------------------------------------------


def test_8_results_nested_100000_deep_is_a_clear_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    data = task_file(tmp_path, {"id": "a", "task": "qa", "input": "Q?", "answers": ["yes"]})
    refused("score", "--results", deep, "--data", data, says="nested too deeply")
    deep_task = tmp_path / "deep.jsonl"
    deep_task.write_text('{"id": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    refused(
        "score",
        "--results",
        bench_results(tmp_path),
        "--data",
        deep_task,
        says="deep.jsonl line 1: JSON nested too deeply",
    )


# ---- 9. /dev/zero and other endless files ---------------------------------------------------


def test_9_dev_zero_as_data_or_results_is_refused_without_reading(tmp_path):
    data = task_file(tmp_path, {"id": "a", "task": "qa", "input": "Q?", "answers": ["yes"]})
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # no writer: opening it to read would block for ever
    cases = [
        ("score", "--results", "/dev/zero", "--data", data),
        ("score", "--results", bench_results(tmp_path), "--data", "/dev/zero"),
        ("bench", "--data", "/dev/zero", "--no-store"),
        ("bench", "--data", fifo, "--no-store"),
        ("generate", "--prompt-file", "/dev/zero", "--no-store"),
        ("generate", "--context-file", fifo, "--prompt", "x", "--no-store"),
    ]
    start = time.monotonic()
    results, peak_mib = cli_child(*cases, tmp_path=tmp_path, memory_gib=6, timeout=120)
    for argv, (code, err) in zip(cases, results):
        assert code == 2 and "Traceback" not in err and "not a regular file" in err, (argv, code, err[-1500:])
    assert peak_mib < 1500 and time.monotonic() - start < 120, peak_mib


# ---- 10. score --out that cannot be written -------------------------------------------------


def test_10_score_out_a_folder_or_under_a_file_is_refused_before_scoring(tmp_path, monkeypatch):
    from workbench.evaluation import bench

    scored = []
    real = bench.score_results
    monkeypatch.setattr(bench, "score_results", lambda *a, **k: scored.append(1) or real(*a, **k))
    data = task_file(tmp_path, {"id": "a", "task": "qa", "input": "Q?", "answers": ["yes"]})
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    for out, says in (
        (tmp_path / "folder", "is a folder"),
        (tmp_path / "file" / "scored.json", "is a file, not a folder"),
    ):
        refused("score", "--results", bench_results(tmp_path), "--data", data, "--out", out, says=says)
    assert not scored, "score did the work before finding --out unwritable"
    assert (tmp_path / "file").read_text() == "x"
    assert cli("score", "--results", bench_results(tmp_path), "--data", data, "--out", tmp_path / "ok.json")[0] == 0
    assert json.loads((tmp_path / "ok.json").read_text())["tasks"][0]["score"] == 100.0


# ---- 11. a lone surrogate --------------------------------------------------------------------


def test_11_a_lone_surrogate_in_a_task_or_prompt_is_a_clear_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "1", "task": "qa", "input": "abc \\ud800 def"}\n', encoding="utf-8")
    refused(
        "bench",
        "--data",
        path,
        "--no-store",
        "--methods",
        "greedy",
        says="t.jsonl line 1: 'input' holds a lone surrogate (U+D800)",
    )
    refused("generate", "--prompt", "abc \udcff", "--no-store", says="the prompt holds a lone surrogate (U+DCFF)")
    from core.models import encode_prompt

    class Tokenizer:  # never reached
        chat_template = None

        def __call__(self, text, **kw):
            raise TypeError("the tokenizer saw it")

    with pytest.raises(InvalidInputError, match="lone surrogate"):
        encode_prompt(Tokenizer(), "x\ud800")


# ---- 12. a 100 MB prompt -----------------------------------------------------------------------


def test_12_a_100_mb_prompt_is_refused_in_little_memory(tmp_path):
    huge = tmp_path / "huge.txt"
    with huge.open("w") as fh:
        for _ in range(100):
            fh.write("word " * 200_000 + "\n")  # 100 MB
    long = tmp_path / "long.txt"
    long.write_text("word " * 1_000_000)  # 5 MB: under the file cap, over the prompt's 4 Mi characters
    cases = {
        ("generate", "--prompt-file", huge, "--no-store"): "more than the 16 MiB",
        ("generate", "--prompt-file", long, "--no-store"): "characters, more than the 4,194,304 allowed",
        ("generate", "--context-file", long, "--prompt", "sum up", "--no-store"): "more than the 4,194,304",
    }
    results, peak_mib = cli_child(*cases, tmp_path=tmp_path, memory_gib=8)
    for (argv, says), (code, err) in zip(cases.items(), results):
        assert code == 2 and "Traceback" not in err and says in err, (argv, code, err[-1500:])
    assert peak_mib < 1500, f"peak {peak_mib} MiB"
    rows = tmp_path / "t.jsonl"
    rows.write_text(json.dumps({"id": "1", "task": "qa", "input": "x" * (5 << 20)}) + "\n")
    refused("bench", "--data", rows, "--no-store", says="t.jsonl line 1: 'input' has 5,242,880 characters")


# ---- 13. WORKBENCH_DB_TIMEOUT ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e300", "abc"])
def test_13_a_bad_lock_timeout_is_a_clear_error(value, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB_TIMEOUT", value)
    refused("store", "list", "--db", tmp_path / "s.db", says="WORKBENCH_DB_TIMEOUT=")
    assert not (tmp_path / "s.db").exists()


# ---- 14. big integers in the CLI's own options ------------------------------------------------


def test_14_big_integers_in_options_are_refused_by_the_parser(tmp_path):
    db = ("--db", tmp_path / "s.db")
    refused("store", "export", "--run", 2**70, "--out", tmp_path / "x", *db, says="out of range")
    refused("store", "list", "--limit", 10**23, *db, says="out of range")
    refused("store", "show", 2**63, *db, says="out of range")
    refused("store", "delete", 1, -(2**70), *db, says="out of range")
    refused("store", "compare", 1, 9 * 10**18 * 10, *db, says="out of range")
    refused("generate", "--prompt", "hi", "--seed", "9" * 400, "--no-store", says="characters is not an integer")
    refused("generate", "--prompt", "hi", "--max-new-tokens", 2**64, "--no-store", says="out of range")
    refused("bench", "--data", "samples", "--limit", 10**23, "--no-store", says="out of range")
    refused("bench", "--data", "samples", "--num-processes", 10**6, "--no-store", says="out of range")
    refused("report", "--limit", 10**30, "--no-run", says="out of range")
    refused("calibrate", "--limit", 10**30, says="out of range")
    refused(
        "generate",
        "--method",
        "aasd[max_nodes=99999999999999999999999]",
        "--prompt",
        "hi",
        "--no-store",
        says="max_nodes",
    )


def test_14_a_400_digit_integer_inside_a_method_string_is_refused():
    refused("generate", "--method", f"aasd[max_nodes={'9' * 400}]", "--prompt", "hi", "--no-store", says="max_nodes")


# ---- 15. exports onto links, FIFOs, devices and existing files --------------------------------


@pytest.fixture
def one_run(tmp_path):
    from tests.test_store import make_run
    from workbench.store import Store

    db = tmp_path / "s.db"
    with Store(str(db)) as s:
        rid = s.save_run(make_run(steps=2, nodes=2))
    return db, rid


def test_15_exports_never_replace_links_fifos_or_devices_and_ask_before_overwriting(tmp_path, one_run):
    db, rid = one_run
    export = ("store", "export", "--run", rid, "--db", db)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "link.jsonl"
    link.symlink_to(victim)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    targets = {link: "is a symbolic link", fifo: "is a FIFO"}
    device = tmp_path / "null.jsonl"
    if os.geteuid() == 0:  # as root a device node can be made (and was replaced by the old export)
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        targets[device] = "is a device"
    for target, says in targets.items():
        for force in ((), ("--force",)):
            refused(*export, "--format", "openinference", "--out", target, *force, says=says)
    assert link.is_symlink() and os.readlink(link) == str(victim) and victim.read_text() == "keep"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if device.exists():
        assert stat.S_ISCHR(os.lstat(device).st_mode)
    existing = tmp_path / "spans.jsonl"
    existing.write_text("earlier\n")
    refused(*export, "--format", "openinference", "--out", existing, says="already exists: pass --force")
    assert existing.read_text() == "earlier\n"
    assert cli(*export, "--format", "openinference", "--out", existing, "--force")[0] == 0
    assert existing.read_text().startswith("{")
    folder = tmp_path / "csv"
    assert cli(*export, "--out", folder)[0] == 0
    before = {p.name: sha(p) for p in folder.iterdir()}
    refused(*export, "--out", folder, says="runs.csv already exists: pass --force")
    (folder / "steps.csv").unlink()
    (folder / "steps.csv").symlink_to(victim)
    refused(*export, "--out", folder, "--force", says="steps.csv is a symbolic link")
    assert victim.read_text() == "keep" and sha(folder / "runs.csv") == before["runs.csv"]
    (folder / "steps.csv").unlink()
    assert cli(*export, "--out", folder, "--force")[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary files left


# ---- 16, 17. another application's SQLite file -------------------------------------------------


def _files(folder: Path) -> dict[str, str]:
    return {p.name: sha(p) for p in folder.iterdir()}


def test_16_a_foreign_sqlite_file_with_alembic_version_is_refused_byte_identical(tmp_path):
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as c:
        c.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        c.execute("INSERT INTO alembic_version VALUES ('9f2c1a7b')")
        c.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        c.commit()
    before = _files(tmp_path)
    err = refused("store", "list", "--db", other, says="another application's database")
    assert "newer spec-workbench" not in err
    assert _files(tmp_path) == before  # no WAL switch, no -wal or -shm file
    newer = tmp_path / "newer.db"  # our tables with a revision this code does not know: a newer spec-workbench
    with contextlib.closing(sqlite3.connect(newer)) as c:
        for table in ("runs", "steps", "nodes", "run_tags"):
            c.execute(f"CREATE TABLE {table} (x)")
        c.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        c.execute("INSERT INTO alembic_version VALUES ('9999')")
        c.commit()
    before = _files(tmp_path)
    refused("store", "list", "--db", newer, says="written by a newer spec-workbench")
    assert _files(tmp_path) == before


def test_17_a_table_less_sqlite_file_marked_by_another_application_is_refused_byte_identical(tmp_path):
    marked = tmp_path / "marked.db"
    with contextlib.closing(sqlite3.connect(marked)) as c:
        c.execute("PRAGMA user_version = 7")
        c.commit()
    before = _files(tmp_path)
    refused("store", "list", "--db", marked, says="another application (no tables, but user_version 7)")
    assert _files(tmp_path) == before
    blank = tmp_path / "blank.db"  # a SQLite file with nothing in it and no mark is adopted as a new store
    with contextlib.closing(sqlite3.connect(blank)) as c:
        c.execute("VACUUM")
    assert cli("store", "list", "--db", blank)[0] == 0


# ---- 18. importing many runs -------------------------------------------------------------------


@pytest.mark.slow
def test_18_csv_import_of_33000_runs_works_in_chunks(tmp_path, one_run):
    """SQLite takes at most 32,766 variables per statement: the old import asked for every id in one IN list."""
    db, rid = one_run
    folder = tmp_path / "csv"
    assert cli("store", "export", "--run", rid, "--db", db, "--out", folder)[0] == 0
    with (folder / "runs.csv").open(encoding="utf-8", newline="") as fh:
        header, row = list(csv.reader(fh))
    id_col = header.index("run_id")
    with (folder / "runs.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for i in range(1, 33_001):
            row[id_col] = str(i if i != 1 else rid)
            w.writerow(row)
    start = time.monotonic()
    code, err = cli("store", "import", folder, "--db", tmp_path / "new.db")
    assert code == 0, err[-2000:]
    from workbench.store import Store

    with Store(str(tmp_path / "new.db")) as s:
        assert len(s.list_runs(limit=None)) == 33_000
    code, err = cli("store", "import", folder, "--db", tmp_path / "new.db")
    assert code == 2 and "are already in" in err and "and 32980 more" in err and "Traceback" not in err
    code, err = cli("store", "import", folder, "--db", tmp_path / "new.db", "--renumber")
    assert code == 0, err[-2000:]
    assert time.monotonic() - start < 240


def test_a_missing_context_file_is_said_before_torch_loads(tmp_path):
    """A newcomer's `generate --context-file report.txt` without the file waited ~10 s for the error: the files are
    now read before the model code is imported (fifth newcomer pass, item 17)."""
    import subprocess
    import sys

    argv = [sys.executable, "-X", "importtime", "-m", "workbench", "generate", "--method", "greedy"]
    argv += ["--context-file", str(tmp_path / "report.txt"), "--prompt", "Summarize the report.", "--no-store"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and "report.txt: not found; check the path" in out.stderr, out.stderr[-800:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "transformers" not in imported
