"""Issue 33, tenth newcomer pass: a run stopped in the prompt's read, the top_k field, the status after Stop, the
single-user share line, the prompt's token count, the method's label and the clock note's glyph. Each test failed on
the code before its fix."""

from __future__ import annotations

from browser_util import synthetic_run


def test_a_run_stopped_before_its_first_token_says_there_is_nothing_to_replay():
    """Run #28, cancelled during prefill (no steps, no tokens), opened to a blank Replay screen. Mutation caught:
    step_info's 'before it wrote a token' branch removed (the header said 'has no steps to replay')."""
    from workbench.ui import replay_view as rv

    run = synthetic_run("greedy", status="cancelled", output_ids=[])
    info = rv.step_info(28, run, 0)
    assert info == "run #28 (greedy) was cancelled before it wrote a token: nothing to replay", info
    assert rv.step_data(28, run, [])["info"] == info
    # a baseline's complete run without step records still says why there are none
    assert "transformers' baselines keep none" in rv.step_info(3, synthetic_run("hf-greedy", output_ids=[1, 2]), 0)


def _checked(methods: list[str], params: dict):
    """A Comparison of `methods` on the default model with the form's parameter fields `params`, checked (no model)."""
    import threading
    from types import SimpleNamespace

    from workbench.ui.compare_tab import PARAM_FIELDS, CompareRequest, Comparison

    fields = {n: params.get(n) for n in PARAM_FIELDS}
    req = CompareRequest("smollm2-135m", None, methods, "p", "", True, 8, fields, None, None, None, None, 1)
    c = Comparison(req, None, SimpleNamespace(allow_local=False), {}, threading.Event(), threading.Event, (), "here")
    c.check()
    return c


def test_the_top_k_field_says_what_the_methods_use_and_a_typed_value_is_used():
    """The top_k field said "default 5" beside greedy, aasd[auto], csd and pld, which sampled with no top-k (their
    default 0), and a 5 typed in was dropped as "untouched" (equal to core.params' default). Mutation caught: the
    field back to core.params' default (value 5, label "default 5"), or CompareRun.check dropping a top_k equal to 5."""
    from workbench.ui.compare_tab import _number, field_info, field_label

    methods = ["greedy", "aasd[auto]", "csd", "pld"]
    assert "default 5" not in field_label("top_k") and "0 = each method's own default" in field_label("top_k")
    assert _number("top_k", True, "").value == 0  # not None: the API keeps the parameter optional
    info = field_info("top_k", methods)
    assert "At 0: greedy, csd, pld use 0 (no top-k)" in info, info
    assert "aasd-topk uses 5" in field_info("top_k", ["greedy", "aasd-topk"])
    # 0 (or None from the API): each method's own default, nothing passed; typed: used as typed, 5 included
    assert all("top_k" not in p for p in _checked(methods, {"temperature": 0.7, "top_k": 0}).per_method)
    blank = _checked(methods, {"temperature": 0.7})
    assert all("top_k" not in p for p in blank.per_method), blank.per_method
    typed = _checked(methods, {"temperature": 0.7, "top_k": 5})
    assert [p.get("top_k") for p in typed.per_method] == [5, None, 5, 5], typed.per_method


def test_temperature_and_top_p_say_which_chosen_methods_keep_another_default():
    """temperature said "default 0" and top_p "default 1" beside nucleus and top-k sampling, which sample at
    temperature 1 (nucleus with top_p 0.8) when the field is left untouched, and a 0 typed in was dropped as
    untouched: nothing on the page said so. The info line now names each chosen method's value and the spec that
    sets the field's. Mutation caught: own_default_note only for OWN_DEFAULT_FIELDS (the top_k-only note)."""
    from workbench.ui.compare_tab import field_info

    # no note on defaults (greedy and csd sample at the field's value); the one line aasd[auto] adds is its own test's
    plain = field_info("temperature", ["greedy", "aasd[auto]", "csd"])
    assert plain.startswith("0 = greedy; > 0 samples (lossless for strict methods)") and "At 0" not in plain, plain
    info = field_info("temperature", ["greedy", "nucleus", "top-k"])
    assert "At 0: greedy uses 0; nucleus, top-k use 1 (nucleus[temperature=0] sets it)" in info, info
    assert "At 1: greedy uses 1; nucleus uses 0.8 (nucleus[top_p=1] sets it)" in field_info(
        "top_p", ["greedy", "nucleus"]
    )
    # what the note says is what runs: untouched keeps nucleus's 1; the spec it names gives 0
    untouched = _checked(["greedy", "nucleus"], {"temperature": 0}).per_method
    assert "temperature" not in untouched[1], untouched
    spelled = _checked(["greedy", "nucleus[temperature=0]"], {"temperature": 0}).per_method
    assert float(spelled[1]["temperature"]) == 0, spelled  # the spec's text, parsed by resolve_params


def test_stopping_stays_in_the_status_line_until_stopped():
    """After Stop during the prompt read the status went back to "running greedy (method 1 of 3): 0 of 128 tokens
    written…" (the run's cancelled record carries no stopping flag) before "stopped: …". Mutation caught: _column
    writing running_status of each progress as it comes (no sticky `stopping`)."""
    import threading
    from types import SimpleNamespace

    from workbench import service
    from workbench.ui.compare_tab import ColumnsView, CompareRequest, Comparison, Place, Reference

    req = CompareRequest("m", None, ["greedy"], "p", "", True, 128, {}, None, None, None, None, 1)
    c = Comparison(req, None, None, {}, threading.Event(), threading.Event, (), "here")
    c.specs, c.per_method, c.n_repeats, c.max_new_tokens = [("greedy", {})], [{}], 1, 128
    c.models = SimpleNamespace(target=SimpleNamespace(tokenizer=None))
    c.pool = SimpleNamespace(prefill_clock=SimpleNamespace(observe=lambda *a: None), busy={})
    c.speeds = SimpleNamespace(add=lambda *a: None)
    c._metrics = lambda *a: "metrics"
    cancelled = synthetic_run("greedy", status="cancelled", output_ids=[])
    c._stream = lambda name, slot: iter(
        [
            service.Progress(name, [], prefill=(0, 900)),
            service.Progress(name, [], prefill=(0, 900), stopping=True),
            service.Progress(name, [], run=cancelled, run_id=28),
        ]
    )
    statuses = [v.status for v in c._column(ColumnsView(""), 0, Place(1, 3, 1), Reference())]
    assert statuses[0].startswith("running **greedy**") and len(statuses) == 3, statuses
    assert all(s.startswith("stopping **greedy**") for s in statuses[1:]), statuses


def test_single_user_mode_says_why_there_is_no_share_button(tmp_path):
    """`serve --single-user` (run.sh demo) had no "Share this run" button and nothing said why. Mutation caught:
    run_picker without its share_note (nothing where the button would be)."""
    import gradio as gr

    from workbench.store import Store
    from workbench.ui.replay_tab import SINGLE_USER_NOTE, run_picker

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    with gr.Blocks():
        single = run_picker(store, can_share=False)
        shared = run_picker(store, can_share=True)
    assert single.share.visible is False and single.share_note is not None
    assert single.share_note.value == SINGLE_USER_NOTE and "nothing to share" in SINGLE_USER_NOTE
    assert "single-user server: every run here is already visible to everyone who opens it" in SINGLE_USER_NOTE
    assert shared.share.visible is True and shared.share_note is None


def test_the_count_under_an_emptied_prompt_says_what_it_counts(monkeypatch):
    """With the Prompt box emptied on a sample with a context the line said "prompt: 204 tokens" right above "⚠ the
    prompt is empty". Mutation caught: prompt_info calling prompt_note without `counted` (the line says "prompt")."""
    from types import SimpleNamespace

    from workbench import service
    from workbench.ui.compare_tab import CompareHandlers

    monkeypatch.setattr(service, "build_prompt", lambda tok, prompt, context, chat: ("t", list(range(204))))
    models = SimpleNamespace(target=SimpleNamespace(tokenizer=None, max_context=8192, dtype="float32"))
    pool = SimpleNamespace(
        loaded=lambda name: models,
        prefill_clock=SimpleNamespace(
            estimate=lambda target, n: (1.5, "this server"), idle_estimate=lambda target, n: None
        ),
    )
    h = CompareHandlers(None, pool, {})
    emptied = h.prompt_info("m", "  ", "a long document", True, ["greedy"])
    assert emptied.startswith("context and chat template: **204 tokens**") and "prompt:" not in emptied, emptied
    assert h.prompt_info("m", "", "a long document", False, ["greedy"]).startswith("context: **204 tokens**")
    assert h.prompt_info("m", "Summarise it", "a long document", True, ["greedy"]).startswith("prompt: **204 tokens**")


def test_the_replay_figures_name_the_method_as_it_was_asked_for():
    """The Replay position-acceptance chart was titled "#7 aasd: …" while the status line, the runs table and
    Analytics said "aasd[auto]". Mutation caught: ReplayHandlers.run_figures labelling with the plain method name."""
    from types import SimpleNamespace

    from core.trace import NodeTrace, StepTrace
    from workbench.ui.replay_tab import ReplayHandlers

    def node(n, parent, decision, source="context"):
        return NodeTrace(0, 10, n, parent, n, 20 + n, "t", source, decision, "", p=0.5)

    step = StepTrace(
        0, 10, 1, 1, [21, 22], nodes=[node(0, -1, "accepted"), node(1, 0, "accepted"), node(2, 1, "bonus")]
    )
    run = synthetic_run("aasd", [step], params={"fitted": 1, "alpha": 0.1, "beta": 0.2})
    cache = SimpleNamespace(get=lambda rid, viewer: (SimpleNamespace(id=rid, trace=run), [], []))
    by_source, positions = ReplayHandlers(None, None, cache).run_figures(None, 7)
    for fig in (by_source, positions):  # every "#7 aasd" in the figure is "#7 aasd[auto]"
        shown = fig.to_json()
        assert shown.count("#7 aasd") == shown.count("#7 aasd[auto]"), fig.data[0].name
    assert "#7 aasd[auto]" in positions.layout.title.text, positions.layout.title.text


def test_the_page_uses_no_glyph_the_browsers_fonts_lack():
    """The Compare clock note began with U+23F1 (stopwatch), which Debian's Chromium fonts lack: it drew as a box.
    Mutation caught: the glyph back in compare_tab (or anywhere in workbench/ui)."""
    from pathlib import Path

    import workbench.ui

    missing = {"\u23f1": "stopwatch"}  # the page's ✂ ■ ⚠ ≈ render; these do not
    ui = Path(workbench.ui.__file__).parent
    found = [
        f"{path.relative_to(ui)}: {name}"
        for path in sorted(ui.rglob("*.py"))
        for glyph, name in missing.items()
        if glyph in path.read_text(encoding="utf-8")
    ]
    assert not found, found
