"""One clock for a run's speed-ups everywhere: each run records its decoding thread's CPU time (RunTrace.
decode_cpu_seconds, the store's runs.decode_cpu_seconds), and Compare, Replay, Diff and `store compare` all take
speed-ups from it when both runs have it (core.stats.speedup), else from the wall clock, saying which. A store made
before the column existed opens, upgraded, and its runs fall back to the wall clock with a note."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from browser_util import synthetic_run
from sqlalchemy import create_engine, insert
from test_store import new_url  # noqa: F401  (the fixture: SQLite, and PostgreSQL when a server is given)

from core.stats import CLOCK_PHRASES, clock_phrase, speedup
from core.trace import StepTrace
from workbench.commands.main import main
from workbench.store import Store
from workbench.store.rows import run_row, step_rows, utcnow
from workbench.store.schema import Run, Step
from workbench.store.schema_version import MIGRATIONS


def timed(method: str, wall: float, cpu: float | None = None, tokens: int = 30, **fields):
    """A complete run of `tokens` one-token steps decoded in `wall` seconds (`cpu` of them the thread's CPU time)."""
    steps = [StepTrace(i, 10 + i, 0, 0, [i]) for i in range(tokens)]
    return synthetic_run(method, steps, decode_seconds=wall, decode_cpu_seconds=cpu, **fields)


# greedy ran while the core was busy: slow on the wall clock (10 tok/s), not in CPU time (20 tok/s)
GREEDY = dict(wall=3.0, cpu=1.5)
AASD = dict(wall=1.0, cpu=0.6)  # 30 tok/s wall (3.00× greedy), 50 tok/s CPU (2.50× greedy)


def test_speed_ups_take_cpu_time_when_both_runs_recorded_it_else_the_wall_clock():
    greedy, aasd = timed("greedy", **GREEDY), timed("aasd", **AASD)
    assert speedup(aasd, greedy) == (pytest.approx(2.5), "cpu")
    assert speedup(timed("aasd", 1.0), greedy) == (pytest.approx(3.0), "wall")  # one side not recorded
    assert speedup(aasd, timed("greedy", 3.0)) == (pytest.approx(3.0), "wall")
    assert speedup(timed("aasd", **AASD, status="cancelled"), greedy) == (None, "")
    assert clock_phrase({"cpu"}) == CLOCK_PHRASES["cpu"] == "speed-ups from decoding CPU time"
    assert "CPU time not recorded" in clock_phrase({"wall"}) and "some from" in clock_phrase({"cpu", "wall"})


def test_compare_and_replay_give_the_same_speed_up_for_the_same_pair():
    """Compare's column (Reference.speedup) and Replay's re-run panel (rerun_outputs) for one stored pair whose wall
    clock and CPU time disagree: the same figure, and Replay names the clock in Compare's words."""
    from workbench.ui.compare_tab import Reference
    from workbench.ui.replay_view import rerun_outputs

    greedy, aasd, rerun = timed("greedy", **GREEDY), timed("aasd", **AASD), timed("aasd", wall=1.2, cpu=0.75)
    compare = Reference(ids=greedy.output_ids, run=greedy).speedup(aasd)[0]
    md = rerun_outputs(7, aasd, rerun, 8, (6, greedy))[2]
    original, rerun_line = md.split("re-run #8")[0], md.split("re-run #8")[1]
    assert f"speed-up {compare:.2f}×" in original and compare == pytest.approx(2.5), md
    assert "speed-up 2.00×" in rerun_line  # 40 CPU tok/s against greedy's 20
    assert md.rstrip().endswith(CLOCK_PHRASES["cpu"]), md


def test_replay_of_runs_without_cpu_time_uses_the_wall_clock_and_says_so():
    from workbench.ui.replay_view import rerun_outputs

    greedy, aasd = timed("greedy", 3.0), timed("aasd", 1.0)  # stored before CPU time was recorded
    md = rerun_outputs(7, aasd, timed("aasd", wall=1.2, cpu=0.75), 8, (6, greedy))[2]
    assert "speed-up 3.00×" in md.split("re-run #8")[0], md
    # the re-run recorded its CPU time, but its reference did not: both its figures are on the wall clock
    assert "speed-up 2.50×" in md.split("re-run #8")[1] and md.rstrip().endswith(CLOCK_PHRASES["wall"]), md


def test_diff_states_the_speed_ratio_and_its_clock():
    from workbench.ui.diff_tab import diff_outputs

    head, _ = diff_outputs(6, timed("greedy", **GREEDY), [], 7, timed("aasd", **AASD), [])
    assert f"at 2.50× the speed of #6 greedy ({CLOCK_PHRASES['cpu']})" in head, head


def test_analytics_says_its_tokens_per_second_are_the_wall_clocks():
    from workbench.ui.figures.analytics import runs_bar_figure

    fig = runs_bar_figure([("#6 greedy", timed("greedy", **GREEDY))])
    assert [a.text for a in fig.layout.annotations] == ["MAL (tokens per step)", "tokens / s (wall clock)"]
    assert list(fig.data[1].y) == [pytest.approx(10.0)]  # 30 tokens in 3.0 wall seconds, not the CPU time's 20


def test_the_engine_records_the_decoding_threads_cpu_time(tiny, tmp_path):
    """run_method (the CLI's bench and generate) and stream_run (the app) both record it, and the store keeps it."""
    from core.methods import run_method
    from workbench import service

    run = run_method("greedy", tiny, [1, 2, 3, 4], {"max_new_tokens": 24})
    # each torch thread adds at most the wall time (core.engine.decode_cpu_clock: the process's time on more than one)
    threads = torch.get_num_threads()
    assert run.decode_cpu_seconds is not None and 0 < run.decode_cpu_seconds <= run.decode_seconds * threads + 0.05
    store = Store(str(tmp_path / "t.db"))
    try:
        last = None
        for last in service.stream_run(
            "pld", service.Models(tiny, None), [1, 2, 3, 4], {"max_new_tokens": 16}, prompt_text="p", store=store
        ):
            pass
        assert last.run.decode_cpu_seconds is not None and last.run.decode_cpu_seconds > 0
        stored = store.load_run(last.run_id, nodes=False).trace
        assert stored.decode_cpu_seconds == last.run.decode_cpu_seconds
    finally:
        store.close()
    # transformers' generate() is timed by the wall clock only: nothing to record
    assert run_method("hf-generate", tiny, [1, 2, 3, 4], {"max_new_tokens": 8}).decode_cpu_seconds is None


def test_the_store_keeps_cpu_time_through_save_recording_and_csv(new_url, tmp_path):  # noqa: F811
    store = Store(new_url("a"))
    try:
        saved = store.save_run(timed("aasd", **AASD))
        header = timed("greedy", **GREEDY)
        with store.recording(timed("greedy", 0.0, tokens=0)) as rec:
            rec.finish(header)
        assert store.load_run(saved, nodes=False).trace.decode_cpu_seconds == 0.6
        assert store.load_run(rec.run_id).trace.decode_cpu_seconds == 1.5
        store.export_csv([saved, rec.run_id], tmp_path / "out")
    finally:
        store.close()
    back = Store(new_url("b"))
    try:
        ids = back.import_csv(tmp_path / "out")
        assert [back.load_run(i, nodes=False).trace.decode_cpu_seconds for i in ids] == [0.6, 1.5]
    finally:
        back.close()


def test_an_export_made_before_the_column_imports_without_it(tmp_path):
    store = Store(str(tmp_path / "a.db"))
    try:
        store.save_run(timed("aasd", **AASD))
        store.export_csv(None, tmp_path / "out")
    finally:
        store.close()
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "out", old)
    lines = (old / "runs.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split(",")
    col = header.index("decode_cpu_seconds")
    import csv
    import io

    rows = list(csv.reader(io.StringIO("".join(lines))))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:col] + r[col + 1 :] for r in rows])
    (old / "runs.csv").write_text(buf.getvalue())
    into = Store(str(tmp_path / "b.db"))
    try:
        [rid] = into.import_csv(old)
        assert into.load_run(rid, nodes=False).trace.decode_cpu_seconds is None
    finally:
        into.close()


def previous_version_store(url: str) -> list[int]:
    """A store as the previous version made it: schema revision 0001 (no decode_cpu_seconds column), holding a greedy
    run and an aasd run of the same prompt; their ids."""
    from alembic import command
    from alembic.config import Config

    engine = create_engine(url)
    ids = []
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        for run in (timed("greedy", 3.0), timed("aasd", 1.0)):
            row = run_row(run)
            del row["decode_cpu_seconds"]
            rid = conn.execute(
                insert(Run.__table__).values(created=utcnow(), finished=utcnow(), **row)
            ).inserted_primary_key[0]
            srows, _ = step_rows(rid, run.steps)
            conn.execute(insert(Step.__table__), srows)
            ids.append(rid)
    engine.dispose()
    return ids


def test_a_store_made_by_the_previous_version_opens_and_falls_back_to_the_wall_clock(new_url, capsys):  # noqa: F811
    url = new_url("old")
    greedy_id, aasd_id = previous_version_store(url)
    store = Store(url)
    try:
        assert store.schema_revision() == "0002"  # upgraded on open
        greedy, aasd = (store.load_run(i).trace for i in (greedy_id, aasd_id))
        assert greedy.decode_cpu_seconds is None and aasd.decode_cpu_seconds is None
        assert speedup(aasd, greedy) == (pytest.approx(3.0), "wall")
        compared = store.compare(greedy_id, aasd_id)
        assert compared["speedup_b_over_a"] == pytest.approx(3.0) and compared["speedup_clock"] == CLOCK_PHRASES["wall"]
        new = store.save_run(timed("aasd", **AASD))  # and it keeps working: new runs record their CPU time
        assert store.load_run(new, nodes=False).trace.decode_cpu_seconds == 0.6
        assert [r.id for r in store.list_runs()][:3] == sorted([greedy_id, aasd_id, new], reverse=True)
    finally:
        store.close()
    assert main(["store", "compare", str(greedy_id), str(aasd_id), "--db", url]) == 0
    out = capsys.readouterr().out
    assert re.search(
        rf"run {aasd_id} at 3\.00× the speed of run {greedy_id} \(speed-ups from the wall clock "
        r"\(decoding CPU time not recorded\)\)",
        out,
    ), out
