"""Issue 33, sixth newcomer pass: the status line's method label, the speed chart's intervals, the diff's first
divergence, the re-score's reasons, the loaded run's settings, the task picker, the runs table's numbers."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from workbench import service


def _comparison(methods, specs):
    from workbench.ui.compare_tab import CompareRequest, Comparison

    req = CompareRequest("m", None, methods, "p", "", True, 8, {}, None, None, None, None, 1)
    c = Comparison(
        req,
        store=None,
        pool=None,
        tasks={},
        stop=threading.Event(),
        run_stop=threading.Event,
        owner_tags=(),
        where="here",
    )
    c.specs, c.per_method, c.n_repeats, c.max_new_tokens = specs, [{} for _ in specs], 1, 8
    c.models = SimpleNamespace(target=SimpleNamespace(tokenizer=None))
    return c


def test_the_status_line_names_the_method_as_its_column_does():
    """The column's head said aasd[auto] while the status line said "running aasd": the status uses the label the
    user chose."""
    from workbench.ui.compare_tab import ColumnsView, Place

    c = _comparison(["greedy", "aasd[auto]"], [("greedy", {}), ("aasd", {"fitted": "auto"})])
    c._stream = lambda name, slot: iter([service.Progress(name, [], prefill=(0, 10))])
    view = ColumnsView("")
    statuses = [v.status for v in c._column(view, 1, Place(2, 2, 1), SimpleNamespace(ids=None, tps=None))]
    assert statuses and all("**aasd[auto]**" in s for s in statuses), statuses


def test_two_repeats_show_their_min_max_and_no_interval_goes_below_zero():
    """Repeats = 2 drew error bars below 0 tok/s (Student's t with one degree of freedom: 12.7 × sd / √2)."""
    from workbench.ui.compare_tab import speed_frame, speed_summary
    from workbench.ui.figures.compare import error_bar, repeat_interval, speed_figure

    two = repeat_interval([10.0, 14.0])
    assert (two["lo"], two["hi"]) == (10.0, 14.0)  # min–max of the two runs
    wild = repeat_interval([1.0, 9.0, 0.5])  # three runs: the t-interval, clipped at 0
    assert wild["mean"] - wild["ci95"] < 0 and wild["lo"] == 0.0 and wild["hi"] == wild["mean"] + wild["ci95"]
    assert repeat_interval([3.0])["lo"] is None and error_bar(repeat_interval([3.0])) == (0.0, 0.0)
    summary = speed_summary(
        ["greedy", "aasd"], [[20.0, 30.0], [5.0, 25.0]], [[1.0, 1.0], [0.25, 0.83]], [[1, 1], [2, 2]]
    )
    frame = speed_frame(summary)
    assert frame["tok/s"].iloc[1] == "15.0 (5.0–25.0)" and frame["speed-up"].iloc[1] == "0.54× (0.25×–0.83×)"
    fig = speed_figure(summary, {"greedy": "#111", "aasd": "#222"})
    bar = fig.data[0]
    lows = [y - down for y, down in zip(bar.y, bar.error_y.arrayminus)]
    assert min(lows) >= 0 and lows == [20.0, 5.0]
    assert "min–max" in fig.layout.title.text


def test_speed_ups_are_ratios_of_cpu_time_when_both_runs_measured_it():
    """The browser on the server's core slowed greedy's wall clock (it runs first, while the page redraws), so the
    app's speed-ups were 10-27 % above the CLI's; the ratio of the decoding threads' CPU time is not inflated."""
    from browser_util import synthetic_run

    from core.stats import CLOCK_PHRASES
    from core.trace import StepTrace
    from workbench.ui.compare_tab import CPU_CLOCK_NOTE, Reference, Speeds

    steps = [StepTrace(i, 10 + i, 0, 0, [i]) for i in range(30)]
    # greedy slowed on the wall clock (15 tok/s), not in CPU time (26 tok/s)
    greedy = synthetic_run("greedy", steps, decode_seconds=2.0, decode_cpu_seconds=30 / 26)
    ref = Reference(ids=[1], run=greedy)
    aasd = synthetic_run("aasd", steps, decode_seconds=1.5, decode_cpu_seconds=30 / (26 * 1.2))
    assert ref.speedup(aasd) == (pytest.approx(1.2), "cpu")
    unmeasured = synthetic_run("aasd", steps, decode_seconds=1.5)  # 20 tok/s: the wall clock, said so
    assert ref.speedup(unmeasured) == (pytest.approx(20.0 / 15.0), "wall")
    assert Reference().speedup(aasd) == (None, "")
    speeds = Speeds(["greedy", "aasd"])
    speeds.clocks.add("cpu")
    assert speeds.clock_note() == CPU_CLOCK_NOTE and "CPU second" in CPU_CLOCK_NOTE
    assert CPU_CLOCK_NOTE.startswith("S" + CLOCK_PHRASES["cpu"][1:])  # Replay's words, capitalised
    speeds.clocks.add("wall")
    assert "wall clock" in speeds.clock_note()


def test_progress_updates_are_paced_by_time_for_every_method():
    """Each update costs a browser on the same core a re-render: the app sends at most one per UPDATE_EVERY."""
    assert 0.3 <= service.UPDATE_EVERY <= 0.5


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.alone  # reads clocks: run.sh runs it with the machine to itself
def test_a_busy_neighbour_on_the_core_slows_the_wall_clock_not_the_decoding_cpu_time(smollm2):
    """Greedy on SmolLM2 with a busy process on the same core (as a browser drawing the page was): the run's
    wall-clock decode time grows, the decoding thread's CPU time (what the app's speed-ups are ratios of) grows far
    less (a shared core's caches still cost it some: how much is the machine's, so the bound is relative)."""
    import os
    import subprocess
    import sys

    import torch

    threads, mask = torch.get_num_threads(), os.sched_getaffinity(0)
    core = {min(mask)}
    ids = smollm2.tokenizer("The lighthouse keeper wrote in his log that the storm", return_tensors=None)["input_ids"]

    def once():
        run = None
        for prog in service.stream_run(
            "greedy", service.Models(smollm2, None), ids, {"max_new_tokens": 48}, prompt_text="p", every=0.0
        ):
            run = prog.run or run
        return run.decode_seconds, run.decode_cpu_seconds

    torch.set_num_threads(1)
    os.sched_setaffinity(0, core)  # this thread, and the worker it starts, on one core
    try:
        alone_wall, alone_cpu = once()
        hog = subprocess.Popen(
            [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {core}); exec('while 1: pass')"]
        )
        try:
            busy_wall, busy_cpu = once()
        finally:
            hog.kill()
            hog.wait()
    finally:
        os.sched_setaffinity(0, mask)
        torch.set_num_threads(threads)
    assert alone_cpu is not None and alone_cpu <= alone_wall * 1.05
    assert busy_wall > 1.5 * busy_cpu, (busy_wall, busy_cpu)  # the neighbour took about half the core
    # the decoding's own work grew far less than its wall time. Not "did not grow": on a 2-vCPU AVX2 VM sharing the
    # core cost the decoding 48 % more CPU time (caches refilled after each switch), its wall time over twice that
    assert busy_cpu / alone_cpu < 0.8 * busy_wall / alone_wall, (busy_cpu, alone_cpu, busy_wall, alone_wall)


def _trace(method, out, params=None, prompt=(1, 2, 3), model="m"):
    from core.trace import RunTrace

    return RunTrace(
        method=method,
        params=params or {},
        model=model,
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=list(prompt),
        output_ids=list(out),
        steps=[],
        decode_seconds=1.0,
    )


def _outlined(body: str) -> tuple[str, str, str]:
    import re

    m = re.search(
        r'<span class="(pair [a-z]+ first)"[^>]*><span class="side a"[^>]*>(.*?)</span><span class="side b"[^>]*>(.*?)</span>',
        body,
    )
    return m.groups()


def test_the_diff_sentence_names_the_cell_it_outlines():
    """One token dropped: the sentence said "#2 aasd ⟨9⟩" (B's token at the same position) while the outlined cell
    showed A's token over a gap; now both say that only A has it there."""
    from workbench.ui.diff_tab import diff_outputs

    a, b = _trace("greedy", [4, 5, 7, 8, 9]), _trace("aasd", [4, 5, 8, 9])
    origins_a = [(t, "model") for t in ["a", "b", "X", "c", "d"]]
    origins_b = [(t, "model") for t in ["a", "b", "c", "d"]]
    head, body = diff_outputs(1, a, origins_a, 2, b, origins_b)
    assert "first divergence at token 2" in head
    assert "the alignment below shows this as `'X'` (id 7) only in #1 greedy" in head, head
    kind, top, bottom = _outlined(body)
    assert kind == "pair deleted first" and top == "X" and "·" in bottom
    # replaced: both tokens, as the cell shows them
    head, body = diff_outputs(1, a, origins_a, 2, _trace("aasd", [4, 5, 6, 8, 9]), [(t, "model") for t in "abYcd"])
    assert "#1 greedy `'X'` (id 7)" in head and "#2 aasd `'Y'` (id 6)" in head
    assert _outlined(body) == ("pair differ first", "X", "Y")
    # inserted: only B has a token there
    head, body = diff_outputs(2, b, origins_b, 1, a, origins_a)
    assert "shows this as `'X'` (id 7) only in #1 greedy" in head and _outlined(body)[0] == "pair inserted first"


def test_the_diff_pickers_say_how_to_reach_an_older_run():
    from workbench.ui.diff_tab import diff_runs
    from workbench.ui.shared import RUN_CHOICES, RUN_PICKER_HELP

    assert str(RUN_CHOICES) in RUN_PICKER_HELP and "any run's id" in RUN_PICKER_HELP
    seen = []
    cache = SimpleNamespace(get=lambda i, viewer: seen.append(i) or pytest.skip("reached the store"))
    with pytest.raises(pytest.skip.Exception):
        diff_runs(cache, "3", "#1 greedy", None)  # a typed id is read as the run's id
    assert seen == [3]


@pytest.mark.real_model
def test_a_diff_from_greedy_explains_its_divergence_as_compare_does(smollm2):
    """The Diff tab said nothing when a divergence was a near-tie; it now gives Compare's explanation (one home:
    tokens.divergence_note) when the server has the model loaded."""
    from core.methods import run_method
    from workbench.ui import tokens
    from workbench.ui.compare_tab import measured_divergence
    from workbench.ui.diff_tab import tie_note

    ids = smollm2.tokenizer("Once upon a time", return_tensors=None)["input_ids"]
    greedy = run_method("greedy", smollm2, ids, {"max_new_tokens": 6})
    out = list(greedy.output_ids)
    out[3] = (out[3] + 1) % smollm2.tokenizer.vocab_size  # a lossless run that left greedy's tokens at token 3
    other = _trace("sd", out, prompt=ids, model=smollm2.name)
    models = service.Models(smollm2, None)
    pool = SimpleNamespace(loaded=lambda name: models if name == smollm2.name else None, slot=lambda name: _null())
    note = tie_note(pool, other, greedy)  # either order
    report = measured_divergence(pool, smollm2.name, models, ids, greedy.output_ids, other)
    assert note and note == tokens.divergence_note(report, True, smollm2.tokenizer.decode)
    assert "parts from greedy at token 3" in note
    assert tie_note(SimpleNamespace(loaded=lambda name: None), greedy, other) == ""  # not loaded: nothing measured
    assert tie_note(pool, greedy, _trace("sd", out, {"temperature": 0.7}, ids, smollm2.name)) == ""  # sampled


def _null():
    from contextlib import nullcontext

    return nullcontext()


def test_the_comparison_draws_no_progress_overlay_on_its_outputs(tmp_path):
    """Gradio's progress overlay (a live timer and a pulsing mask on each of the comparison's outputs) is work the
    page does while the methods decode on the same core; the status line says how far the comparison is. (Measured
    with benchmarks/bench_stream_updates.py it is not the main cost: see the speed-up clock test above.)"""
    from workbench.service import ModelPool
    from workbench.ui import build_app

    demo = build_app(db=str(tmp_path / "t.db"), pool=ModelPool("cpu", "float32"))
    (event,) = [f for f in demo.fns.values() if f.api_name == "compare"]
    assert event.show_progress == "hidden"


def _node(i, parent, depth, token, p, rank, decision, reason):
    from core.trace import NodeTrace

    stats = (
        {}
        if parent < 0
        else dict(p=p, entropy=1.0, max_p=0.6, p_eos=0.0, rank=rank, logit_gap=0.0 if rank == 0 else 1.0)
    )
    return NodeTrace(
        0, 5, i, parent, depth, 100 + i, token, "root" if parent < 0 else "context", decision, reason, **stats
    )


def test_a_rescore_row_says_a_sibling_was_accepted_first():
    """Two children of the root both pass CASD's δ; the walk takes one child per depth, so the other is not taken.
    Its row said only "passed, but a longer or likelier path was chosen"; now it names the sibling accepted first."""
    from core.trace import StepTrace
    from workbench.rescore import flips_table, rescore_step

    nodes = [
        _node(0, -1, 0, "", None, None, "accepted", "root"),
        _node(1, 0, 1, " a", 0.6, 0, "accepted", "p ok"),
        _node(2, 0, 1, " b", 0.3, 1, "accepted", "p ok"),  # recorded as accepted: the re-score flips it
        _node(3, 1, 2, " c", 0.5, 0, "accepted", "p ok"),
        _node(4, 2, 2, " d", 0.01, 3, "rejected", "p low"),
    ]
    step = StepTrace(0, 5, 4, 2, [101, 103, 7], nodes=nodes)
    result = rescore_step(step, "casd", {"delta": 0.05})
    by_node = {n.node: n for n in result.nodes}
    assert by_node[1].decision == "accepted" and by_node[2].decision == "rejected"
    assert by_node[3].decision == "accepted" and by_node[4].decision == "unreached"
    rows = {r["node"]: r for r in flips_table(result)}  # node 2 (accepted -> rejected), node 4 (rejected -> unreached)
    assert "sibling node 1 (' a') at depth 1 was accepted first" in rows[2]["reason"], rows[2]["reason"]
    assert "sibling" not in rows[4]["reason"]  # its parent is off the path: "an ancestor was not accepted"
    (row,) = [r for r in flips_table(result) if r["node"] == 2]
    assert "accepted first" in row["reason"]


def test_a_greyed_slider_shows_the_loaded_runs_value_not_the_last_one(tmp_path):
    """Loading an aasd run after a csd run left λ's greyed slider at the csd run's 3: it now shows the default and
    says the run did not use it; a slider the run used shows the run's value."""
    from core.params import PARAMS
    from workbench.store import Store
    from workbench.ui.replay_tab import ReplayHandlers
    from workbench.ui.shared import TUNABLE, RunCache

    store = Store(str(tmp_path / "t.db"))
    run = _trace("aasd", [4, 5], {"alpha": 0.3, "beta": 0.05, "max_new_tokens": 2})
    run.steps = []
    rid = store.save_run(run)
    h = ReplayHandlers(store, None, RunCache(store))
    out = h.open(SimpleNamespace(session_hash="s"), rid)
    sliders = dict(zip(TUNABLE, out[2 : 2 + len(TUNABLE)]))
    assert sliders["lam"]["value"] == PARAMS["lam"].default and sliders["lam"]["interactive"] is False
    assert "not used by aasd" in sliders["lam"]["label"]
    assert sliders["alpha"]["value"] == 0.3 and sliders["alpha"]["interactive"] is True
    assert "not used" not in sliders["alpha"]["label"]


def test_the_task_picker_turns_to_your_own_text_only_when_the_boxes_left_the_task():
    from workbench.evaluation.tasks.task import Task
    from workbench.ui.compare_tab import OWN_TEXT, CompareHandlers, own_text_choice, task_fields

    t = Task("s1", "qa", "Who built it?", context="The lighthouse was built in 1871.")
    context, prompt = task_fields(t)[:2]
    assert own_text_choice("s1", {"s1": t}, {}, context, prompt) == {"__type__": "update"}  # a task filling the boxes
    moved = own_text_choice("s1", {"s1": t}, {}, context, prompt + " And when?")
    assert moved["value"] == OWN_TEXT and OWN_TEXT in moved["choices"] and "s1" in moved["choices"]
    assert own_text_choice("(free text)", {"s1": t}, {}, "", "anything") == {"__type__": "update"}
    up = Task("u1", "qa", "Q?")
    assert own_text_choice("upload:u1", {}, {"upload:u1": up}, "", "Q? more")["value"] == OWN_TEXT
    h = CompareHandlers(store=SimpleNamespace(where="here"), pool=None, tasks={"s1": t})
    assert all(u == {"__type__": "update"} for u in h.pick_task(OWN_TEXT, {}, 128, 128))  # the boxes stay


def test_rerun_settings_show_only_what_the_method_reads():
    """A re-run's settings listed rescue_eos and top_k 0 for methods that read neither (or, at T = 0, no top-k)."""
    from workbench.ui.replay_view import rerun_settings

    casd = _trace("casd", [1], {"delta": 0.1, "rescue_eos": 1, "top_k": 0, "max_new_tokens": 8})
    assert rerun_settings(casd) == "casd, δ 0.1"
    csd = _trace("csd", [1], {"tau": 0.5, "lam": 6, "rescue_eos": 1, "top_k": 0, "temperature": 0.0})
    shown = rerun_settings(csd)
    assert "λ 6" in shown and "rescue_eos 1" in shown and "top_k" not in shown  # csd reads rescue_eos; T = 0: no top-k
    sampled = _trace("csd", [1], {"tau": 0.5, "lam": 6, "top_k": 40, "temperature": 0.8})
    assert "top_k 40" in rerun_settings(sampled)


def test_the_runs_table_explains_each_of_its_columns(tmp_path):
    """Defect 9: the runs table's columns (MAL, tok/s, tags) were not explained; a legend under it names each, and
    the numbers are rounded (MAL 2 decimals, tok/s 1)."""
    from workbench.service import ModelPool
    from workbench.store import Store
    from workbench.ui import build_app
    from workbench.ui.replay_tab import RUNS_LEGEND
    from workbench.ui.shared import RUN_COLUMNS, runs_frame

    for column in RUN_COLUMNS[1:]:
        assert f"**{column}**" in RUNS_LEGEND, column
    demo = build_app(db=str(tmp_path / "t.db"), pool=ModelPool("cpu", "float32"))
    shown = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "replay-runs-legend"]
    assert shown and shown[0].value == RUNS_LEGEND
    store = Store(str(tmp_path / "r.db"))
    run = _trace("aasd", [4, 5, 6], {"alpha": 0.3})
    run.decode_seconds = 0.123456
    store.save_run(run)
    row = runs_frame(store).iloc[0]
    assert row["tok/s"] == round(3 / 0.123456, 1)


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.alone  # reads clocks: run.sh runs it with the machine to itself
def test_the_first_prefill_estimate_is_within_reach_of_the_measured_prefill(smollm2):
    """Defect 4: the first estimate, before any comparison, came from the cost curve alone and was 2-2.5x low; the
    pool's warm-up now times a 256-token prefill, which the first estimate scales. Checked against a measured
    prefill of a 1,500-token prompt on SmolLM2."""
    from core.methods import run_method

    pool = service.ModelPool("cpu", "float32")
    target = pool.load("smollm2-135m").target
    assert target is smollm2 or target.name == smollm2.name
    words = smollm2.tokenizer("The lighthouse keeper wrote in his log that the storm had passed. " * 120)
    ids = words["input_ids"][:1500]
    estimate, source = pool.prefill_clock.estimate(target, len(ids))
    assert "256-token prompt" in source
    measured = min(run_method("greedy", target, ids, {"max_new_tokens": 1}).prefill_seconds for _ in range(2))
    # within a factor of 2 either way (core 0 is shared by other jobs, so one prefill may run at half speed); the
    # pass measured the curve-only rule 2-2.5x low on its machine (on this one, at one thread, it is 1.3-1.6x high)
    assert 0.5 * measured < estimate < 2.0 * measured, (estimate, measured)
