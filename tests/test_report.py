"""The papers' tables from hand-made result rows, the checkpoint file, and a benchmark killed mid-run and
resumed on a tiny random model giving the table an uninterrupted run gives."""

from __future__ import annotations

import csv
import io
import json

import pytest

from core.errors import InvalidInputError
from workbench.evaluation.bench import Checkpoint, read_checkpoint, run_resumable
from workbench.evaluation.report import (
    DEFAULT_DATA,
    DELTAS,
    PAPER,
    PAPER_LONGBENCH,
    PAPER_SETUP,
    Results,
    build_tables,
    csd_ablation,
    delta_method,
    delta_sweep,
    efficiency_table,
    load_published,
    oracles,
    render_markdown,
    score_table,
    sweep_table,
    table_methods,
)
from workbench.evaluation.scores import score_task
from workbench.evaluation.tasks import Task


def row(dataset, id, method, score=None, decoded=10, steps=10, seconds=1.0, drafted=0, accepted=0):
    return {
        "category": dataset,
        "id": id,
        "method": method,
        "score": score,
        "decoded": decoded,
        "steps": steps,
        "tokens": decoded,
        "decode_seconds": seconds,
        "prefill_seconds": 0.0,
        "drafted": drafted,
        "accepted": accepted,
        "rescued": 0,
        "timed_steps": steps,
    }


# ---- tables from hand-made rows -----------------------------------------------------------------


def test_score_table_averages_present_scores_and_shows_absent_ones():
    rows = [
        row("qa", "1", "greedy", 40.0),
        row("qa", "2", "greedy", 60.0),
        row("code", "1", "greedy", None),
        row("qa", "1", "aasd", 70.0),
        row("qa", "2", "aasd", 50.0),
        row("code", "1", "aasd", 30.0),
    ]
    t = score_table(Results(rows), "t1", "Table 1", ["greedy", "top-k", "aasd"], ["qa", "code"])
    assert t.rows[0] == ["greedy (ARD / vanilla)", 50.0, None, 50.0]  # code has no score: absent, and left out of Avg.
    assert t.rows[1] == ["aasd", 60.0, 30.0, 45.0]
    md = t.markdown()
    assert "| greedy (ARD / vanilla) | 50.00 | – | 50.00 |" in md and "Not run: top-k." in md
    parsed = list(csv.reader(io.StringIO(t.csv())))
    assert parsed[0] == ["method", "qa", "code", "Avg."] and parsed[1] == ["greedy (ARD / vanilla)", "50.0", "", "50.0"]


def test_efficiency_pools_tokens_and_compares_speed_on_the_same_items():
    rows = [
        row("qa", "1", "greedy", decoded=10, steps=10, seconds=1.0),
        row("qa", "2", "greedy", decoded=10, steps=10, seconds=1.0),
        # aasd ran only item 1: 12 tokens in 4 steps and 0.5 s -> MAL 3, 24 tok/s, 2.4x greedy's 10 tok/s on that item
        row("qa", "1", "aasd", decoded=12, steps=4, seconds=0.5, drafted=10, accepted=8),
    ]
    t = efficiency_table(Results(rows), "t2", "Table 2", ["greedy", "aasd"], ["qa"])
    assert t.rows[0][1:] == [1.0, 10.0, 1.0]
    assert t.rows[1][1:] == [3.0, 24.0, pytest.approx(2.4)]
    assert "| aasd | 3.00 | 24.00 | 2.40× |" in t.markdown()


def test_oracle_d_and_oracle_s_by_hand():
    a, b = delta_method(0.1), delta_method(0.01)
    assert (a, b) == ("casd", "casd[delta=0.01]")
    rows = [
        row("nq", "1", a, 10.0),
        row("nq", "2", a, 50.0),
        row("nq", "1", b, 40.0),
        row("nq", "2", b, 0.0),
        row("nq", "1", "greedy", 5.0),
        row("nq", "2", "greedy", 5.0),
    ]
    oracle_d, oracle_s = oracles(Results(rows), ["nq"])
    assert oracle_d["nq"] == (30.0, 0.1)  # δ = 0.1 averages 30, δ = 0.01 averages 20
    assert oracle_s["nq"] == 45.0  # per sample: max(10, 40) and max(50, 0)
    pairs = build_tables(rows, ["casd"])
    table1 = pairs[0][0]
    assert table1.rows[-2][:2] == ["Oracle-D (best δ per dataset)", 30.0] and table1.rows[-1][:2] == [
        "Oracle-S (best δ per sample)",
        45.0,
    ]
    assert "Oracle-D's δ: nq: 0.1" in table1.note and pairs[0][1] is PAPER["casd_table1"]
    sweep = sweep_table(Results(rows), ["nq"], "score")
    assert [r[0] for r in sweep.rows] == ["0.1", "0.01", "greedy (baseline)"] and sweep.rows[1][1] == 20.0
    data = delta_sweep(rows)
    assert data["deltas"] == [0.1, 0.01] and data["datasets"]["nq"]["score"] == [30.0, 20.0]
    assert data["datasets"]["nq"]["greedy_mal"] == 1.0
    from workbench.ui.figures.report import delta_sweep_figure

    fig = delta_sweep_figure(data, "score")
    assert [tr.name for tr in fig.data] == ["nq", "nq greedy"] and fig.layout.xaxis.type == "log"


def test_csd_ablation_speed_up_is_over_plain_sd():
    rows = [
        row("humaneval", "1", "greedy", 0.0, seconds=2.0),
        row("humaneval", "1", "sd", 100.0, seconds=1.0, drafted=10, accepted=5),
        row("humaneval", "1", "csd", 100.0, seconds=0.5, drafted=10, accepted=8),
    ]
    t = csd_ablation(Results(rows), ["humaneval"])
    assert t.rows[0][1:] == [100.0, 0.5, 10.0, 1.0]  # sd against itself
    assert t.rows[1][1:] == [100.0, 0.8, 20.0, 2.0]  # the paper's Table 3 reports speed-up over SD, not over greedy
    assert "Not run: sd-memory-only, sd-gating-only." in t.note


def test_report_markdown_has_setup_tables_and_papers():
    rows = [row("qa", "1", m, 50.0) for m in table_methods(["aasd"])]
    pairs = build_tables(rows, ["aasd"])
    assert [m.key for m, _ in pairs] == ["aasd_table1", "aasd_table2", "aasd_table4", "aasd_table5", "summary"]
    md = render_markdown(pairs, ["aasd"], {"model": "tiny", "draft model": None})
    assert "- **model**: tiny" in md and "draft model" not in md
    assert "LLaMA3.1-8B-Instruct on 4 A100" in md and "| AASD | 34.54 | 91.56 |" in md
    assert md.index("AASD Table 1: scores") < md.index("Paper: AASD Table 1")
    assert len(PAPER["casd_table8"].rows) == len(DELTAS)


# ---- the checkpoint file ----------------------------------------------------------------------


def test_the_papers_numbers_come_from_the_data_file():
    published = load_published()
    assert set(PAPER) == set(published["tables"]) >= {"aasd_table1", "casd_table8", "csd_table3"}
    for key, table in PAPER.items():
        data = published["tables"][key]
        assert (table.key, table.title, table.rows) == (f"paper_{key}", f"Paper: {data['title']}", data["rows"])
        assert len(table.kinds) == len(table.header) and all(len(r) == len(table.header) for r in table.rows), key
        assert all(isinstance(v, (int, float)) for r in table.rows for v, k in zip(r, table.kinds) if k != "text"), key
    assert PAPER["aasd_table1"].rows[-1][:2] == ["AASD", 34.54] and PAPER["csd_table3"].rows[0][2] == 0.636
    assert PAPER_SETUP == published["setup"] and set(PAPER_SETUP) == {"aasd", "casd", "csd"}
    assert PAPER_LONGBENCH == tuple(published["longbench_datasets"]) and len(PAPER_LONGBENCH) == 8
    assert DEFAULT_DATA["aasd"] == ("longbench:" + ",".join(d for d in PAPER_LONGBENCH if d != "nq"),)


def test_checkpoint_survives_a_torn_line_and_refuses_another_configuration(tmp_path):
    path = tmp_path / "c.jsonl"
    with Checkpoint(path, {"model": "m", "dtype": "float32"}) as ck:
        ck.append(row("qa", "1", "greedy", 1.0))
        ck.append(row("qa", "2", "greedy", 2.0))
    with open(path, "a") as fh:
        fh.write('{"category": "qa", "id": "3", "meth')  # killed in the middle of a write
    with Checkpoint(path, {"model": "m", "dtype": "float32"}) as ck:
        assert ck.done() == {("qa", "1", "greedy"), ("qa", "2", "greedy")}
        ck.append(row("qa", "2", "greedy", 5.0))  # a later line for the same key wins
    header, rows = read_checkpoint(path)
    assert header["config"] == {"model": "m", "dtype": "float32"} and rows[("qa", "2", "greedy")]["score"] == 5.0
    assert all(json.loads(line) for line in path.read_text().splitlines())  # the torn line was cut away
    with pytest.raises(InvalidInputError, match=r"another configuration \(dtype: 'float32' there, 'bfloat16' now\)"):
        Checkpoint(path, {"model": "m", "dtype": "bfloat16"})
    with Checkpoint(path, {"model": "m", "dtype": "float32"}):
        with pytest.raises(InvalidInputError, match="being written by another run"):
            Checkpoint(path, {"model": "m", "dtype": "float32"})
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(InvalidInputError, match="c.jsonl line 2: not valid JSON"):
        read_checkpoint(path)


# ---- kill mid-run, rerun, identical table ---------------------------------------------------------


class Killed(Exception):
    pass


@pytest.fixture
def tiny_bench(tiny, monkeypatch):
    import workbench.evaluation.bench as bench

    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:40])
    tasks = [
        Task(id=str(i), task="qa", input=f"abc abc {i} abc", answers=["t60 t85 t21", "t35 t3"], category="ab"[i % 2])
        for i in range(4)
    ]
    methods = ["pld", "aasd", delta_method(0.1), delta_method(0.01)]

    def run(path, store_run=None):
        with Checkpoint(path, {"model": tiny.name}) as ck:
            return run_resumable(
                tiny,
                tasks,
                methods,
                ck,
                {"max_new_tokens": 12},
                store_run=store_run,
                scorer=lambda t, text: score_task(t, text),
                progress=False,
            )

    return run, len(tasks) * (len(methods) + 1)


def _stable(rows):
    """The tables with the measured times taken out: scores, MAL, acceptance and tokens."""
    pairs = build_tables(rows, ["aasd", "casd"])
    keep = [
        t
        for t, _ in pairs
        if t.key in ("aasd_table1", "aasd_table4", "casd_table1", "casd_sweep_score", "casd_sweep_mal")
    ]
    summary = [t for t, _ in pairs if t.key == "summary"][0]
    cols = [
        summary.header.index(c) for c in ("dataset", "method", "runs", "scored", "score", "MAL", "accept", "tokens")
    ]
    return [t.csv() for t in keep] + [[[r[i] for i in cols] for r in summary.rows]]


def test_a_killed_benchmark_resumes_and_gives_the_same_table(tiny_bench, tmp_path):
    run, total = tiny_bench
    whole = run(tmp_path / "whole.jsonl")
    assert len(whole) == total

    calls = []

    def dies_after_five(task, trace):
        if len(calls) == 5:
            raise Killed  # the sixth run is in flight when the process dies
        calls.append((task.id, trace.method))
        return len(calls)

    with pytest.raises(Killed):
        run(tmp_path / "killed.jsonl", store_run=dies_after_five)
    assert len(read_checkpoint(tmp_path / "killed.jsonl")[1]) == 5

    calls.clear()
    resumed = run(tmp_path / "killed.jsonl", store_run=lambda task, trace: calls.append(task.id) or None)
    assert len(calls) == total - 5  # what was done is not run again
    assert _stable(resumed) == _stable(whole)
    by_key = lambda rows: {(r["category"], r["id"], r["method"]): (r["token_ids"], r["score"]) for r in rows}  # noqa: E731
    assert by_key(resumed) == by_key(whole)
    assert [r["run_id"] for r in resumed[:5]] == [1, 2, 3, 4, 5]

    calls.clear()
    again = run(tmp_path / "killed.jsonl", store_run=lambda task, trace: calls.append(task.id))
    assert calls == [] and again == resumed  # nothing left to run: the table comes from the checkpoint alone


def test_runs_go_to_the_trace_store_tagged_report(tiny_bench, tmp_path):
    from workbench.store import Store

    run, total = tiny_bench
    store = Store(str(tmp_path / "traces.db"))
    rows = run(
        tmp_path / "c.jsonl",
        store_run=lambda task, trace: store.save_run(trace, tags=["report", f"dataset={task.category}"]),
    )
    stored = store.list_runs(tag="report", limit=None)
    assert len(stored) == total and {r["run_id"] for r in rows} == {s.id for s in stored}
    assert len(store.list_runs(tag="dataset=a", limit=None)) == total // 2


# ---- the command ------------------------------------------------------------------------------


def test_report_command_rebuilds_tables_from_a_checkpoint_and_rejects_bad_input(tmp_path, capsys, monkeypatch):
    import plotly.graph_objects as go

    from workbench.commands.main import main

    def no_png(self, *args, **kwargs):  # keep the test off Chromium: PNG export is optional
        raise RuntimeError("\nKaleido requires Google Chrome to be installed.")

    monkeypatch.setattr(go.Figure, "write_image", no_png)

    out = tmp_path / "report"
    rows = [
        row("nq", str(i), m, float(10 * i + k), decoded=10 + k, steps=10)
        for i in range(2)
        for k, m in enumerate(table_methods(["casd"]))
    ]
    with Checkpoint(out / "checkpoint.jsonl", {"model": "tiny", "tables": ["casd"], "data": ["longbench:nq@x"]}) as ck:
        for r in rows:
            ck.append(r)
    assert main(["report", "--out", str(out), "--no-run"]) == 0
    md = (out / "report.md").read_text()
    assert "CASD Table 1" in md and "Oracle-S" in md and "- **tasks per dataset**: nq 2" in md
    assert (out / "tables" / "casd_table1.csv").exists() and (out / "tables" / "paper_casd_table8.csv").exists()
    assert (out / "figures" / "delta_sweep_score.html").exists() and (out / "figures" / "delta_sweep_mal.html").exists()
    err = capsys.readouterr().err
    assert err.count("PNG figures skipped (Kaleido requires Google Chrome to be installed.)") == 1
    first = (out / "tables" / "casd_table1.csv").read_text()
    assert (
        main(["report", "--out", str(out), "--no-run"]) == 0
        and (out / "tables" / "casd_table1.csv").read_text() == first
    )

    capsys.readouterr()
    for argv, message in [
        (["report", "--tables", "aasd,nope", "--no-store"], "unknown table set(s) nope; known: aasd, casd, csd"),
        (["report", "--data", "longbnech:qasper", "--no-store"], "unknown dataset 'longbnech'"),
        (["report", "--data", "samples:nope", "--no-store"], "unknown category nope"),
        (["report", "--tables", "csd", "--data", "samples", "--no-store"], "need a draft model: pass --draft"),
        (["report", "--out", str(tmp_path / "empty"), "--no-run"], "no checkpoint at"),
    ]:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_a_report_names_its_checkpoint_relative_to_the_working_directory(tmp_path, monkeypatch):
    """Generated documents (docs/RESULTS.md) carry no machine's absolute paths."""
    from workbench.commands.report import shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "results" / "report" / "checkpoint.jsonl") == "results/report/checkpoint.jsonl"
    outside = tmp_path.parent / "elsewhere" / "checkpoint.jsonl"
    assert shown_path(outside) == str(outside)  # not under the working directory: as given
