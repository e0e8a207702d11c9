"""Property-based fuzzing (Hypothesis) of the task-file parser, CSV import and the CLI's parameters:
every input gives a correct result or a clear error (a WorkbenchError, or argparse's exit code 2),
never a traceback, and the input file is never changed."""
from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.errors import WorkbenchError

slow = pytest.mark.slow

CASES = settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12)
KEYS = ["id", "task", "input", "context", "answers", "template", "max_new_tokens", "chat", "category", "test",
        "entry_point", "question_id", "turns", "reference", "task_id", "prompt", "dataset", "_id", "all_classes"]
rows = st.dictionaries(st.sampled_from(KEYS), json_values | st.text(max_size=30), max_size=8)
lines = st.one_of(rows.map(json.dumps), st.text(max_size=60), json_values.map(json.dumps),
                  st.just('{"id": "1", "task": "qa", "input": "hi", "template": "{0} {input}"}'))
task_files = st.one_of(st.lists(lines, max_size=4).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
                       st.binary(max_size=80))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@CASES
@given(data=task_files)
@example(data=b'{"turns": [null], "id": "", "question_id": ""}')  # found in CI: a Spec-Bench row whose turn is not text
def test_task_file_parser(data):
    from workbench.evaluation.tasks import load_tasks

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tasks.jsonl"
        path.write_bytes(data)
        before = sha(path)
        try:
            tasks = load_tasks(path)
        except WorkbenchError:
            tasks = None
        assert sha(path) == before
        for t in tasks or []:
            assert isinstance(t.id, str) and isinstance(t.input, str)
            try:
                assert isinstance(t.prompt(), str)
            except WorkbenchError:
                pass


# ---------------------------------------------------------------- CSV import

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """An export folder of one small run, and an empty store to import into (each case rolls back)."""
    from tests.test_store import make_run
    from workbench.store import Store

    root = tmp_path_factory.mktemp("fuzz-csv")
    with Store(str(root / "src.db")) as s:
        rid = s.save_run(make_run(steps=2, nodes=2))
        s.export_csv([rid], root / "out")
    store = Store(str(root / "dst.db"))
    yield root / "out", store
    store.close()


cells = st.one_of(st.text(max_size=40), json_values.map(json.dumps), st.integers().map(str),
                  st.floats().map(repr), st.sampled_from(["", "=1+1", "'=x", "2024-05-01T12:00:00+02:00", "nan",
                                                          "[" * 200, str(2**70), "-0", "1e400"]))


@CASES
@given(which=st.sampled_from(["runs.csv", "steps.csv", "nodes.csv"]), data=st.data())
def test_csv_import(exported, which, data):
    from workbench.store.csv_io import read_csv_dir

    folder, store = exported
    with tempfile.TemporaryDirectory() as d:
        work = Path(d) / "in"
        shutil.copytree(folder, work)
        path = work / which
        table = list(csv.reader(path.open(encoding="utf-8", newline="")))
        mode = data.draw(st.sampled_from(["cell", "cell", "cell", "row", "bytes"]))
        if mode == "cell":
            r = data.draw(st.integers(0, len(table) - 1))
            c = data.draw(st.integers(0, len(table[r]) - 1))
            table[r][c] = data.draw(cells)
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(table)
            path.write_text(buf.getvalue(), encoding="utf-8", newline="")
        elif mode == "row":
            table.append(data.draw(st.lists(cells, max_size=len(table[0]) + 1)))
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(table)
            path.write_text(buf.getvalue(), encoding="utf-8", newline="")
        else:
            path.write_bytes(data.draw(st.binary(max_size=200)))
        before = {p.name: sha(p) for p in work.iterdir()}
        try:
            runs, steps, nodes = read_csv_dir(work)
        except WorkbenchError:
            runs = None
        assert {p.name: sha(p) for p in work.iterdir()} == before
        if runs is not None:  # what parsed, the store takes: imported (then deleted again), or a clear error
            for r in runs:
                assert isinstance(r["tags"], list) and all(isinstance(t, str) for t in r["tags"])
            try:
                ids = store.import_csv(work, renumber=True)
            except WorkbenchError:
                return
            assert {p.name: sha(p) for p in work.iterdir()} == before
            store.delete_runs(ids)


# ---------------------------------------------------------------- CLI parameters

@pytest.fixture(scope="module")
def parser():
    from workbench.commands.main import build_parser

    return build_parser()


PARAM_OPTIONS = ["--temperature", "--top-p", "--top-k", "--seed", "--delta", "--alpha", "--beta", "--tau", "--lam",
                 "--max-new-tokens", "--gamma", "--max-nodes", "--align-graft", "--key-len", "--ngram"]
values = st.one_of(st.floats().map(repr), st.integers(min_value=-(2**70), max_value=2**70).map(str),
                   st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "", " ", "0x10", "1_000", "٣"]),
                   st.text(max_size=10))
methods = st.one_of(st.sampled_from(["greedy", "pld", "aasd", "casd", "csd", "sd", "beam", "aasd-fixed", "nope"]),
                    st.builds(lambda m, k, v: f"{m}[{k}={v}]", st.sampled_from(["aasd", "pld", "casd"]),
                              st.sampled_from(["align_graft", "alpha", "delta", "gamma", "bogus", ""]), values),
                    st.text(max_size=15))


@CASES
@given(options=st.lists(st.tuples(st.sampled_from(PARAM_OPTIONS), values), max_size=4), method=methods)
def test_cli_parameters(parser, options, method):
    """Parsing and checking the parameters (everything `generate` does before loading a model)."""
    from core.methods import parse_method_spec, resolve_params
    from workbench.commands import common

    argv = ["generate", "--prompt", "hi", f"--method={method}"] + [f"{o}={v}" for o, v in options]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = parser.parse_args(argv)
    except SystemExit as e:
        assert e.code == 2
        return
    try:
        name, overrides = parse_method_spec(args.method)
        params = resolve_params(name, {**common.params_from(args), **overrides})
    except WorkbenchError:
        return
    for k, v in params.items():
        assert not (isinstance(v, float) and not math.isfinite(v)), (k, v)
    json.dumps(params, allow_nan=False)  # what the store and --json write
