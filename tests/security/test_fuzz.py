"""Property-based fuzzing (Hypothesis) of the task-file parser (directly and through the command line), CSV
import, the CLI's parameters and integer options, and method strings: every input gives a correct result or a
clear error (a WorkbenchError, or exit code 2), never a traceback, and the input file is never changed.

Each property runs under the "fuzz" profile registered in tests/conftest.py: 1,000 cases, derandomized (the
same cases in every run, so a failure in CI repeats on any machine)."""

from __future__ import annotations

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
from conftest import FUZZ_PROFILE
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.errors import WorkbenchError

CASES = settings(settings.get_profile(FUZZ_PROFILE))
# Whole commands (a store opened, a results file scored) cost 10-100 ms a case: a few hundred cases of each, beside
# the 1,000 of the parsers they call.
COMMAND_CASES = settings(CASES, max_examples=min(300, CASES.max_examples))

# Text as a hostile file holds it: any code point, lone surrogates included (JSON's "\ud800" escapes them).
hostile_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=20)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | hostile_text,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
KEYS = [
    "id",
    "task",
    "input",
    "context",
    "answers",
    "template",
    "max_new_tokens",
    "chat",
    "category",
    "test",
    "entry_point",
    "question_id",
    "turns",
    "reference",
    "task_id",
    "prompt",
    "dataset",
    "_id",
    "all_classes",
]
rows = st.dictionaries(st.sampled_from(KEYS), json_values | st.text(max_size=30), max_size=8)
lines = st.one_of(
    rows.map(json.dumps),
    st.text(max_size=60),
    json_values.map(json.dumps),
    st.just('{"id": "1", "task": "qa", "input": "hi", "template": "{0} {input}"}'),
    st.just('{"id": 1, "task": "qa", "input": "hi", "max_new_tokens": ' + "9" * 5000 + "}"),
    st.integers(1, 3000).map(lambda n: '{"id": "1", "task": "qa", "input": ' + "[" * n + "]" * n + "}"),
)
task_files = st.one_of(
    st.lists(lines, max_size=4).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")), st.binary(max_size=80)
)


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
            assert t.category is None or isinstance(t.category, str)
            t.input.encode("utf-8")  # no lone surrogate reaches a tokenizer
            try:
                assert isinstance(t.prompt(), str)
            except WorkbenchError:
                pass


def cli(argv: list[str]) -> int:
    """The exit code of the command line run in this process (argparse's exit included); an exception escapes."""
    from workbench.commands.main import main

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return main(argv)
        except SystemExit as e:
            return e.code


@pytest.fixture(scope="module")
def results_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz-score") / "results.json"
    path.write_text(json.dumps({"methods": {"greedy": {}}, "tasks": [{"id": "1", "method": "greedy", "text": "hi"}]}))
    return path


@COMMAND_CASES
@given(data=task_files)
def test_task_files_through_score(results_file, data):
    """`score --data F`: the task file read, every row checked, a clear error (2) or a score (0)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tasks.jsonl"
        path.write_bytes(data)
        assert cli(["score", "--results", str(results_file), "--data", str(path)]) in (0, 2)


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


cells = st.one_of(
    st.text(max_size=40),
    json_values.map(json.dumps),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["", "=1+1", "'=x", "2024-05-01T12:00:00+02:00", "nan", "[" * 200, str(2**70), "-0", "1e400"]),
)


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


def parsed(parser, argv: list[str]):
    """The parsed arguments, or None when argparse refused them (with its usage error, exit code 2)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return parser.parse_args(argv)
    except SystemExit as e:
        assert e.code == 2
        return None


@pytest.fixture(scope="module")
def parser():
    from workbench.commands.main import build_parser

    return build_parser()


PARAM_OPTIONS = [
    "--temperature",
    "--top-p",
    "--top-k",
    "--seed",
    "--delta",
    "--alpha",
    "--beta",
    "--tau",
    "--lam",
    "--max-new-tokens",
    "--gamma",
    "--max-nodes",
    "--align-graft",
    "--key-len",
    "--ngram",
]
values = st.one_of(
    st.floats().map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.integers(1, 300).map(lambda n: "9" * n),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "", " ", "0x10", "1_000", "٣"]),
    st.text(max_size=10),
)
methods = st.one_of(
    st.sampled_from(["greedy", "pld", "aasd", "casd", "csd", "sd", "beam", "aasd-fixed", "nope"]),
    st.builds(
        lambda m, k, v: f"{m}[{k}={v}]",
        st.sampled_from(["aasd", "pld", "casd"]),
        st.sampled_from(["align_graft", "alpha", "delta", "gamma", "bogus", ""]),
        values,
    ),
    st.text(max_size=15),
)


@CASES
@given(options=st.lists(st.tuples(st.sampled_from(PARAM_OPTIONS), values), max_size=4), method=methods)
def test_cli_parameters(parser, options, method):
    """Parsing and checking the parameters (everything `generate` does before loading a model)."""
    from core.methods import parse_method_spec, resolve_params
    from workbench.commands import common

    args = parsed(parser, ["generate", "--prompt", "hi", f"--method={method}"] + [f"{o}={v}" for o, v in options])
    if args is None:
        return
    try:
        name, overrides = parse_method_spec(args.method)
        params = resolve_params(name, {**common.params_from(args), **overrides})
    except WorkbenchError:
        return
    for k, v in params.items():
        assert not (isinstance(v, float) and not math.isfinite(v)), (k, v)
    json.dumps(params, allow_nan=False)  # what the store and --json write


# ---------------------------------------------------------------- the CLI's own integer options

integers_as_typed = st.one_of(
    st.integers().map(str),
    st.integers(1, 500).map(lambda n: "9" * n),
    st.sampled_from(["2**70", "1e3", "-0", "0x10", "nan", "", " 5", "٣", "1_000"]),
    st.text(max_size=8),
)
STORE_COMMANDS = [
    ["store", "list", "--limit", "{v}"],
    ["store", "show", "{v}"],
    ["store", "show", "1", "--step", "{v}"],
    ["store", "delete", "{v}"],
    ["store", "compare", "{v}", "1"],
    ["store", "export", "--run", "{v}", "--out", "{out}"],
]
PARSE_ONLY = [
    ["bench", "--data", "x", "--limit", "{v}"],
    ["bench", "--data", "x", "--batch-size", "{v}"],
    ["bench", "--data", "x", "--num-processes", "{v}"],
    ["bench", "--data", "x", "--repeats", "{v}"],
    ["report", "--limit", "{v}"],
    ["report", "--max-prompt-tokens", "{v}"],
    ["calibrate", "--limit", "{v}"],
    ["calibrate", "--held-out-from", "{v}"],
    ["calibrate", "--seq-len", "{v}"],
    ["serve", "--port", "{v}"],
    ["generate", "--seed", "{v}"],
    ["generate", "--max-new-tokens", "{v}"],
    ["generate", "--top-k", "{v}"],
]


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-store")
    from workbench.store import Store

    Store(str(folder / "s.db")).close()
    return folder


@COMMAND_CASES
@given(command=st.sampled_from(STORE_COMMANDS), value=integers_as_typed)
def test_store_commands_take_any_integer_text(empty_store, command, value):
    """The store's commands run to their end on an empty store: a clear error (2) or a result (0)."""
    argv = [a.format(v=value, out=empty_store / "export") for a in command] + ["--db", str(empty_store / "s.db")]
    assert cli(argv) in (0, 2)


@CASES
@given(command=st.sampled_from(PARSE_ONLY), value=integers_as_typed)
def test_integer_options_parse_within_64_bits_or_exit_2(parser, command, value):
    from workbench.commands.common import INT64_MAX

    args = parsed(parser, [a.format(v=value) for a in command])
    if args is None:
        return
    for name, v in vars(args).items():
        if isinstance(v, int) and not isinstance(v, bool):
            assert -INT64_MAX - 1 <= v <= INT64_MAX, (name, v)
