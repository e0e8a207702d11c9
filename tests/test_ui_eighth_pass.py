"""Issue 33, eighth newcomer pass: the first-divergence note names the rule that chose a token, the prefill estimate,
the waiting status, speed labels against bars, analytics, export labels, and the README's figures."""

from __future__ import annotations

import pytest
from browser_util import synthetic_run

from core.trace import NodeTrace, RunTrace, StepTrace


def _node(step, node, parent, depth, token, text, decision, rank=0, gap=0.0, reason="", source="context"):
    return NodeTrace(
        step, 40, node, parent, depth, token, text, source, decision, reason, p=0.3, rank=rank, logit_gap=gap
    )


def _csd_run(decision: str, rank: int) -> RunTrace:
    """Two steps: step 0 emits tokens 0-1 (plain), step 1 emits tokens 2-4, the divergent token 3 by node 2, which
    `decision` put there at the target's rank `rank`."""
    s0 = StepTrace(
        0,
        40,
        0,
        0,
        [11, 12],
        nodes=[
            _node(0, 0, -1, 0, 10, "r", "accepted"),
            _node(0, 1, 0, 1, 11, "a", "accepted"),
            _node(0, 2, 1, 2, 12, "b", "bonus", source="model"),
        ],
    )
    reason = "differs from the target's sample; correction 7; count 16 ≥ λ 6; z(x) − z(t*) -0.500 ≥ log τ -4.605"
    s1 = StepTrace(
        1,
        42,
        2,
        2,
        [13, 99, 15],
        nodes=[
            _node(1, 0, -1, 0, 12, "b", "accepted"),
            _node(1, 1, 0, 1, 13, "c", "accepted"),
            _node(1, 2, 1, 2, 99, " The", decision, rank=rank, gap=0.5, reason=reason),
            _node(1, 3, 2, 3, 15, "d", "bonus", source="model"),
        ],
    )
    return RunTrace(
        "csd",
        {"temperature": 0.0},
        "m",
        None,
        "cpu",
        "bfloat16",
        "p",
        [1, 2, 3],
        output_ids=[11, 12, 13, 99, 15],
        steps=[s0, s1],
    )


REPORT = {"position": 3, "greedy_token": 7, "token": 99, "gap": 0.25, "dtype": "bfloat16", "near_tie": True}
DECODE = {7: "<|im_end|>", 99: " The"}.get


def test_a_rescued_divergent_token_is_the_rules_choice_not_a_near_tie():
    """Run 441: CSD rescued the divergent token (rank 1, count 16 ≥ λ 6) and the note said "a near-tie … not because
    of the method's rule". Mutation caught: dropping the `_rule_chose` branch (or its "rescued" test) in
    tokens.divergence_note brings the near-tie wording back."""
    from workbench.ui.tokens import divergence_note, emitting_node

    run = _csd_run("rescued", rank=1)
    assert emitting_node(run.steps, 3).token_id == 99 and emitting_node(run.steps, 1).decision == "bonus"
    note = divergence_note(REPORT, lossless=False, decode=lambda ids: DECODE(ids[0]), run=run)
    assert "not because of the method's rule" not in note and "near-tie" not in note, note
    assert (
        "rescued" in note
        and "count 16 ≥ λ 6" in note
        and "its rank in the target's order is 1, not 0" in note
        and "correction '<|im_end|>'" in note
    )
    # both gaps are stated, each with its logits: greedy's one-token forward 0.25, the run's own step 0.5
    assert (
        "0.25 apart in the model's logits on greedy's text" in note
        and "0.5 below the top logit in this run's own step 1" in note
    )
    # a relaxed rule's acceptance of a lower-ranked token is the rule's too
    relaxed = divergence_note(REPORT, lossless=False, decode=lambda ids: DECODE(ids[0]), run=_csd_run("accepted", 2))
    assert (
        "relaxed rule accepted it" in relaxed
        and "its rank in the target's order is 2, not 0" in relaxed
        and "near-tie" not in relaxed
    )
    # where the method's own step took the target's argmax, a near-tie is rounding, as before
    top = divergence_note(REPORT, lossless=False, decode=lambda ids: DECODE(ids[0]), run=_csd_run("accepted", 0))
    assert "near-tie" in top and "not because of the method's rule" in top and "took the target's top token" in top


def _read(tokens: int, seconds: float):
    from types import SimpleNamespace

    return SimpleNamespace(prompt_ids=[0] * tokens, prefill_seconds=seconds, status="complete", steps=[])


def test_the_prefill_estimate_is_monotone_in_length_and_near_the_measured_prefills(monkeypatch):
    """A fresh page priced a 221-token prompt at 0.3 s from the warm-up's 256-token read while real reads took
    1.35-1.77 s; later a 269-token prompt still said 0.3 s while 221 tokens said 1.1 s. Mutation caught: scaling the
    observation nearest in length (the old rule) prices 269 tokens below 221 after a 221-token read."""
    from types import SimpleNamespace

    from core.cost_model import CostModel
    from workbench import service

    model = CostModel((0, 64), (256, 1024), ((0.03, 0.03 + 64e-3), (0.04, 0.04 + 80e-3)))
    monkeypatch.setattr(service, "cost_model", lambda target: model)
    target = SimpleNamespace(name="smollm2", device="cpu", dtype="bfloat16")
    clock = service.PrefillClock()
    clock.observe(target, _read(256, 0.3))  # an idle read (the warm-up's length), then the comparison's own reads
    clock.observe(target, _read(221, 1.5))
    lengths = [40, 100, 221, 250, 256, 269, 400, 1000, 3000]
    estimates = [clock.estimate(target, n)[0] for n in lengths]
    assert estimates == sorted(estimates), list(zip(lengths, estimates))
    for n in (221, 269):  # within a factor 1.5 of the measured read
        assert 1.5 / 1.5 < clock.estimate(target, n)[0] < 1.5 * 1.5, (n, clock.estimate(target, n))
    assert "221-token prompt in 1.5 s" in clock.estimate(target, 269)[1]
    # the warm-up's idle read alone: used, and said to be an idle read
    fresh = service.PrefillClock()
    fresh.observe(target, _read(256, 0.3), warm_up=True)
    seconds, source = fresh.estimate(target, 221)
    assert seconds < 0.3 and "warm-up" in source and "takes longer" in source
    fresh.observe(target, _read(221, 1.5))  # the first real read replaces it
    assert abs(fresh.estimate(target, 221)[0] - 1.5) < 1e-9


def test_two_comparisons_take_the_model_in_turns_and_the_waiting_one_says_so(tiny):
    """Two tabs: B said "waiting … yours starts when it is done" while the comparisons ran method by method in
    alternation, and B then said "running csd … reading the prompt" while A's csd ran. Now a comparison holds the
    model's turn for all its methods, and a method whose run waits for the model's slot says "waiting".
    Mutations caught: without the turn (`_take_turn` / turns.take always True) the methods interleave; without the
    waiting Progress in stream_run the status during a held slot says "reading the prompt"."""
    import threading
    import time

    from workbench import service
    from workbench.ui.compare_tab import CompareRequest, Comparison

    pool = service.ModelPool("cpu", "float32")
    events: list[tuple[str, str, str]] = []

    def comparison(tag):
        req = CompareRequest("m", None, ["greedy", "pld"], "p", "", True, 24, {}, None, None, None, None, 1)
        c = Comparison(req, None, pool, {}, threading.Event(), threading.Event, (), "here")
        c.specs, c.per_method, c.n_repeats, c.max_new_tokens = [("greedy", {}), ("pld", {})], [{}, {}], 1, 24
        c.models, c.ids, c.text, c.compression, c.full_ids = (
            service.Models(tiny, None),
            list(range(2, 40)),
            "p",
            None,
            None,
        )
        inner = c._stream

        def stream(name, slot):
            events.append((tag, name, "start"))
            for prog in inner(name, slot):
                yield prog
            events.append((tag, name, "end"))

        c._stream = stream
        return c

    statuses: dict[str, list[str]] = {"A": [], "B": []}

    def consume(tag, c, pause=0.0):
        for view in c:
            statuses[tag].append(view.status)
            time.sleep(pause)

    a, b = comparison("A"), comparison("B")
    ta = threading.Thread(target=consume, args=("A", a, 0.3))  # a slow page: A's methods take a while each
    ta.start()
    while not events:
        time.sleep(0.01)
    tb = threading.Thread(target=consume, args=("B", b))
    tb.start()
    ta.join(60)
    tb.join(60)
    order = [tag for tag, _, _ in events]
    assert order == sorted(order) or order == sorted(order, reverse=True), events  # A's methods, then B's (no mix)
    assert any("another comparison is using it" in s and "in turns" in s for s in statuses["B"]), statuses["B"]
    # a method whose slot is held by another generation (a replay's re-run) says it waits, not "reading the prompt"
    c = comparison("C")
    firsts: list = []
    with pool.slot("m"):
        stream = service.stream_run(
            "greedy", c.models, c.ids, {"max_new_tokens": 4}, prompt_text="p", slot=lambda s: pool.slot("m", s)
        )
        reader = threading.Thread(target=lambda: firsts.append(next(stream)), daemon=True)
        reader.start()
        reader.join(10)  # the old stream said nothing at all until the slot was free
        assert firsts and firsts[0].waiting and firsts[0].prefill is None, firsts
    first = firsts[0]
    from workbench.ui.compare_tab import running_status

    assert running_status("csd", 3, 3, 1, 1, first, 24).startswith("waiting for the model")
    assert all(not p.waiting for p in stream)


def _timed(method: str, tokens: int, wall: float, cpu: float) -> RunTrace:
    return synthetic_run(method, output_ids=list(range(tokens)), decode_seconds=wall, decode_cpu_seconds=cpu)


def test_a_column_says_when_its_wall_clock_speed_disagrees_with_its_cpu_time_speed_up():
    """Run 5: greedy 8.2 tok/s, aasd[auto] 8.1, csd 5.6 while the bars said 1.66× and 1.41× (CPU time). Mutation
    caught: returning "" from core.stats.wall_clock_note (or dropping its tolerance test) fails the first (second)
    assertion."""
    from core.stats import speedup, wall_clock_note

    greedy = _timed("greedy", 82, 10.0, 10.0)  # 8.2 tok/s, on an idle core
    aasd = _timed("aasd", 81, 10.0, 10.0 / 1.66)  # 8.1 tok/s, but 1.66× less CPU per token
    ratio, clock = speedup(aasd, greedy)
    assert clock == "cpu" and round(ratio, 2) == 1.64
    note = wall_clock_note(aasd, greedy)
    assert "wall clock 0.99×" in note and "1.64×" in note and "decoding CPU time" in note, note
    agree = _timed("aasd", 160, 10.0, 160 / (8.2 * 1.9))  # 16 tok/s (1.95×) against 1.9× CPU: within 20 %
    assert wall_clock_note(agree, greedy) == ""


def test_the_bench_tables_legend_names_its_clock():
    """`bash run.sh table` defines speed-up as wall-clock tps ÷ greedy's while the app's are from CPU time: its legend
    says which. Mutation caught: the old legend ("tps ÷ greedy's tps in the same run") has no clock."""
    from workbench.evaluation.bench import COLUMN_MEANINGS

    assert "wall clock" in COLUMN_MEANINGS["speedup"] and "decoding CPU time" in COLUMN_MEANINGS["speedup"]


def test_the_readmes_tree_cost_figures_agree_and_name_their_command():
    """README's hero caption said 16 draft tokens take 2.6× a greedy step, the next paragraph 2.7× in float32, and
    1.5× in bfloat16 against the app's 1.4×. Mutation caught: the old README (2.6× vs 2.7×, no "about")."""
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    caption = re.findall(r"16 draft tokens take about (\d\.\d)× a greedy step in float32", readme)
    paragraph = re.findall(
        r"about (\d\.\d)× one over a single token in bfloat16 \(.*?\) and about (\d\.\d)× in float32", readme, re.S
    )
    assert caption and paragraph and caption[0] == paragraph[0][1], (caption, paragraph)
    assert "calibrate --timing --dtype D" in readme and "computes its figure from\nthe curve measured" in readme


def test_the_readmes_commands_name_files_that_ship_and_say_how_long_the_bench_takes():
    """README's generate example read report.txt, which does not exist; its 160-decode bench said nothing of the
    ~2 h it takes. Mutation caught: the old README (report.txt; no time, no quick variant)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    for path in re.findall(r"--context-file (\S+)", readme):
        assert (root / path).is_file(), path
    assert "about 2 h on 2 shared CPU cores" in readme and "--limit 1 --methods greedy,pld,hf-generate" in readme


def test_analytics_counts_only_runs_that_take_the_parameter_and_labels_speeds_as_compare_does():
    """The sweep said "every chosen run used alpha = 0.1" for greedy + aasd[auto] + csd (only aasd takes α), and the
    tokens/s bars read 9.021 / 19 / 18.73 against Compare's 9.0 / 19.0 / 18.7. Mutations caught: counting every
    run's stored alpha (greedy's and csd's too) draws greedy and csd lines; num() labels give "9.021"."""
    from workbench.ui.figures.analytics import runs_bar_figure, sweep_figure

    def run(method, alpha, lengths, tps=None):
        r = RunTrace(method, {"alpha": alpha}, "m", None, "cpu", "float32", "p", [1], status="complete")
        r.external_accept_lengths = lengths
        if tps is not None:  # the decoded tokens are the accept lengths' sum
            r.decode_seconds = sum(lengths) / tps
        return r

    runs = [run("greedy", 0.2, [1, 1]), run("aasd", 0.1, [3, 3]), run("aasd", 0.3, [2]), run("csd", 0.2, [2])]
    fig = sweep_figure(runs, "alpha")
    assert {tr.name for tr in fig.data} == {"aasd"}, [tr.name for tr in fig.data]
    one = sweep_figure(runs[:2] + runs[3:], "alpha")  # aasd at one value only: the note names it, not greedy's 0.2
    assert "alpha = 0.1" in one.layout.annotations[0].text
    bars = runs_bar_figure([("#1 greedy", run("greedy", 0, [1], 9.021)), ("#2 aasd", run("aasd", 0.1, [2], 19.0))])
    assert list(bars.data[1].text) == ["9.0", "19.0"]


def test_loading_names_the_draft_and_a_vocabulary_mismatch_is_said_in_words():
    """With draft qwen2.5-coder-0.5b the status said "loading smollm2-135m…" for the 11 s the draft took, then the
    mismatch read "first difference: '!'". Mutations caught: the old f"loading {model}…" has no draft; the old
    message has no "encode differently"."""
    from types import SimpleNamespace

    from core.models import VocabularyMismatchError, check_pair
    from workbench.ui.compare_tab import loading_words

    target = SimpleNamespace(name="smollm2-135m", draft=None)
    assert "draft model qwen2.5-coder-0.5b" in loading_words("smollm2-135m", "qwen2.5-coder-0.5b", None)
    assert loading_words("smollm2-135m", "qwen2.5-coder-0.5b", SimpleNamespace(target=target, draft=None)) == (
        "loading the draft model qwen2.5-coder-0.5b (the target smollm2-135m is loaded)…"
    )
    assert loading_words("smollm2-135m", None, None) == "loading smollm2-135m…"

    def model(name, vocab):
        return SimpleNamespace(name=name, tokenizer=SimpleNamespace(get_vocab=lambda: vocab))

    try:
        check_pair(model("smollm2-135m", {"!": 0, "a": 1}), model("qwen2.5-coder-0.5b", {"!": 5, "a": 1}))
    except VocabularyMismatchError as e:
        text = str(e)
    assert "'!' is the first token the two tokenizers encode differently (id 0 in the target's" in text, text


def test_single_user_mode_offers_no_share_and_says_why(tmp_path):
    """The demo (single-user) answered "run #442 is shared: anyone using this app can see it" though everyone sees
    every run there already. Mutations caught: a visible Share button in single-user mode; the old answer."""
    from workbench.service import ModelPool
    from workbench.ui.access import Viewer
    from workbench.ui.builder import build_app
    from workbench.ui.replay_tab import ALREADY_VISIBLE, ReplayHandlers

    def share_button(demo):
        return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "replay-share")

    single = build_app(db=str(tmp_path / "a.db"), pool=ModelPool("cpu", "float32"), single_user=True)
    assert share_button(single).visible is False
    multi = build_app(db=str(tmp_path / "b.db"), pool=ModelPool("cpu", "float32"))
    assert share_button(multi).visible is not False
    handlers = ReplayHandlers(single.store, single.pool, None, who=lambda request: Viewer(None))
    assert handlers.share(None, 442) == ALREADY_VISIBLE and "already visible to everyone" in ALREADY_VISIBLE


def test_runs_csv_names_a_run_as_the_app_lists_it_and_old_exports_still_import(tmp_path):
    """runs.csv's `method` said `aasd` for the run the app lists as `aasd[auto]`. `method_label` now says what the app
    shows, beside the plain `method` that import reads; an export without the new column imports as before.
    Mutation caught: without the derived column (or with `method_label` = the plain method) the label check fails."""
    import csv

    from workbench.store import Store

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    run = RunTrace("aasd", {"fitted": 1, "alpha": 0.1}, "m", None, "cpu", "float32", "p", [1], output_ids=[2, 3])
    rid = store.save_run(run)
    store.export_csv([rid], tmp_path / "out")
    rows = list(csv.DictReader(open(tmp_path / "out" / "runs.csv", encoding="utf-8")))
    assert rows[0]["method"] == "aasd" and rows[0]["method_label"] == "aasd[auto]"
    assert Store(f"sqlite:///{tmp_path / 'b.db'}").import_csv(tmp_path / "out") == [rid]
    # the same export without the column (as written before it existed) imports too
    old = tmp_path / "old"
    old.mkdir()
    for name in ("steps", "nodes"):
        (old / f"{name}.csv").write_bytes((tmp_path / "out" / f"{name}.csv").read_bytes())
    with open(tmp_path / "out" / "runs.csv", encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    drop = table[0].index("method_label")
    with open(old / "runs.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([r[:drop] + r[drop + 1 :] for r in table])
    imported = Store(f"sqlite:///{tmp_path / 'c.db'}")
    assert imported.import_csv(old) == [rid] and imported.load_run(rid).trace.method == "aasd"


def test_a_rescore_row_gives_the_deciding_reason_and_the_sibling_apart_in_plain_words():
    """A flip read "p 0.4259 < θ 0.5137 …; not taken: sibling node 3 (' ') at depth 1 was accepted first (one child
    per depth)": two reasons at once and jargon. Mutation caught: the old sibling_note (the same "not taken: …
    accepted first (one child per depth)" for a node its threshold rejected)."""
    from types import SimpleNamespace

    from workbench.rescore import sibling_note

    won = SimpleNamespace(node=3, parent=0, depth=1, token_text=" ", decision="accepted", reason="p ok")
    failed = SimpleNamespace(
        node=2, parent=0, depth=1, token_text="x", decision="rejected", reason="p 0.4259 < θ 0.5137"
    )
    note = sibling_note(failed, [won, failed])
    assert "not taken" not in note and "one child per depth" not in note and "Its rule decided" in note, note
    assert "only one token can follow at each position" in note
    passed = SimpleNamespace(
        **{**vars(failed), "reason": "p 0.6 ≥ θ 0.5; passed, but a longer or likelier path was chosen"}
    )
    note = sibling_note(passed, [won, passed])
    assert (
        note.startswith("; not taken: sibling node 3 (' ') at depth 1 was accepted first") and "one child" not in note
    )


def test_a_replay_step_title_counts_rescued_tokens_apart():
    """Run 441 step 14 read "2 of 2 drafted accepted" while verification rejected one and CSD rescued it. Mutation
    caught: the old title (no "rescued")."""
    from workbench.ui.figures.replay import tree_title

    step = _csd_run("rescued", rank=1).steps[1]
    assert tree_title(step) == "step 1: 2 of 2 drafted kept (1 rescued), 3 emitted"
    assert tree_title(_csd_run("accepted", rank=0).steps[1]) == "step 1: 2 of 2 drafted accepted, 3 emitted"


def test_a_bad_run_id_closes_the_previous_run(tmp_path):
    """Loading run 99999999 showed the error but left the previous run's slider, figures and "is shared" line. Now
    the slider hides, the step data is emptied (the browser's STEP_JS then empties the figure slots and says no run is
    shown, beside the error), and every way of opening a run clears the share line. Mutations caught: the old error
    return (gr.update() for the slider); STEP_JS returning early without emptying the slots."""
    from workbench.service import ModelPool
    from workbench.store import Store
    from workbench.ui.access import Viewer
    from workbench.ui.replay_js import STEP_JS
    from workbench.ui.replay_tab import ReplayHandlers
    from workbench.ui.shared import RunCache

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    h = ReplayHandlers(store, ModelPool("cpu", "float32"), RunCache(store), who=lambda request: Viewer(None))
    out = h.open(None, 99999999)
    assert out[0] == {"__type__": "update", "value": 0, "visible": "hidden"}, out[0]
    assert "99999999" in out[1] and out[-1] is None  # the error, and no run opened
    no_run = STEP_JS[STEP_JS.index("if (!data || !Array.isArray(data.steps))") :]
    assert no_run.index("put('replay-nodes', '')") < no_run.index("return [info]")


@pytest.mark.real_model
def test_on_smollm2_the_diff_and_compare_note_name_a_rescue_at_the_divergence(smollm2):
    """The same explanation on a real model (one forward, as Compare and Diff measure it): a CSD run whose token 3,
    not greedy's, was rescued by its rule is the rule's choice, whatever the logit gap there. Mutation caught: Diff's
    tie_note not passing the run to divergence_note (the note then cannot see the rescue)."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from core.methods import run_method
    from workbench import service
    from workbench.ui.diff_tab import tie_note

    ids = smollm2.tokenizer("Once upon a time", return_tensors=None)["input_ids"]
    greedy = run_method("greedy", smollm2, ids, {"max_new_tokens": 6})
    out = list(greedy.output_ids)
    out[3] = (out[3] + 1) % smollm2.tokenizer.vocab_size

    def plain(k, token):
        return StepTrace(
            k,
            0,
            0,
            0,
            [token],
            nodes=[_node(k, 0, -1, 0, token, "", "accepted"), _node(k, 1, 0, 1, token, "t", "bonus", source="model")],
        )

    reason = "differs from the target's sample; correction 7; count 16 ≥ λ 6; z(x) − z(t*) -0.500 ≥ log τ -4.605"
    rescue = StepTrace(
        3,
        0,
        1,
        1,
        [out[3], out[4]],
        nodes=[
            _node(3, 0, -1, 0, out[2], "", "accepted"),
            _node(3, 1, 0, 1, out[3], "x", "rescued", rank=1, gap=0.5, reason=reason),
            _node(3, 2, 1, 2, out[4], "y", "bonus", source="model"),
        ],
    )
    csd = RunTrace(
        "csd",
        {"temperature": 0.0},
        smollm2.name,
        None,
        "cpu",
        "float32",
        "p",
        list(ids),
        output_ids=out,
        steps=[plain(0, out[0]), plain(1, out[1]), plain(2, out[2]), rescue, plain(4, out[5])],
    )
    models = service.Models(smollm2, None)
    pool = SimpleNamespace(
        loaded=lambda name: models if name == smollm2.name else None, slot=lambda name: nullcontext()
    )
    note = tie_note(pool, greedy, csd)
    assert "parts from greedy at token 3" in note and "CSD's rule rescued it" in note, note
    assert "not because of the method's rule" not in note and "count 16 ≥ λ 6" in note


def test_removing_an_uploaded_file_takes_the_picker_off_its_tasks(tmp_path):
    """Ninth pass, defect 1: after ✕ on an uploaded task file the picker kept 'upload:…' as its value while its
    choices no longer held it, so Run failed in Gradio's own words ("Value: upload:… is not in the list of
    choices") with a traceback in the server log. The picker now goes back to a bundled sample; a bundled task or
    the user's own text stays."""
    from workbench.ui.compare_tab import FREE_TEXT, OWN_TEXT, CompareHandlers

    h = CompareHandlers(None, None, {"extract-orders": object(), "sum-council": object()}, None)
    for current, expected in (
        ("upload:my-fox", "extract-orders"),
        ("sum-council", "sum-council"),
        (FREE_TEXT, FREE_TEXT),
        (OWN_TEXT, OWN_TEXT),
    ):
        update = h.upload(None, current)[1]
        assert update["value"] == expected and expected in update["choices"], (current, update)
        assert not any(str(c).startswith("upload:") for c in update["choices"])


def test_a_short_read_does_not_set_the_prefill_estimates_scale(monkeypatch):
    """Ninth pass, defect 2: a 66-token read (0.4 s, mostly fixed overhead) scaled to a 4,383-token prompt priced it
    at 97 s; the read took 31 s. Reads shorter than MIN_SCALED_READ leave the scale to the warm-up's 256-token
    read. Mutation caught: MIN_SCALED_READ back at 32."""
    from types import SimpleNamespace

    from core.cost_model import CostModel
    from workbench import service

    model = CostModel((0, 64), (256, 1024), ((0.03, 0.03 + 64e-3), (0.04, 0.04 + 80e-3)))
    monkeypatch.setattr(service, "cost_model", lambda target: model)
    target = SimpleNamespace(name="smollm2", device="cpu", dtype="bfloat16")
    clock = service.PrefillClock()
    clock.observe(target, _read(256, 1.0), warm_up=True)
    clock.observe(target, _read(66, 0.4))
    seconds, source = clock.estimate(target, 4383)
    assert "warm-up" in source and "66-token" not in source
    assert abs(seconds - 1.0 * service.prefill_shape(model, 4383) / service.prefill_shape(model, 256)) < 1e-9
    clock.observe(target, _read(500, 2.0))  # a read long enough sets the scale
    assert "500-token prompt in 2.0 s" in clock.estimate(target, 4383)[1]
