"""The Replay & tune tab: pick a stored run, step through it (text so far, draft tree, thresholds,
node table), re-score every stored step under new thresholds without the model, or re-run it.

Components are built by small functions, one per panel; the handlers are methods of ReplayHandlers
and turn replay_view's pure results into outputs. The session keeps only the run id.

Opening a run is one round trip (ReplayHandlers.open: the slider, the sliders' values, the run's text and
step data, the last run's re-score and re-run panels cleared), then the browser draws its first step; the
run's two acceptance figures follow. The tab opens on the newest run this session may see, drawn.

Switching steps makes no round trip: the slider's change runs replay_js.STEP_JS in the browser, which draws
the step's header, text cut, draft tree, threshold figure and node table from the step data
(benchmarks/bench_replay_browser.py times it). The API keeps /replay_step, answered by the server (Plotly
figures, a node table)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import gradio as gr

from core.errors import WorkbenchError
from core.params import PARAMS
from core.stats import NODE_ACCEPTANCE, POSITION_ACCEPTANCE
from core.trace import RunTrace
from workbench import service
from workbench.rescore import prepare_run, rescore_run
from workbench.store import Store
from workbench.ui import replay_view as rv
from workbench.ui import tokens
from workbench.ui.access import NOBODY, SHARED_TAG, not_visible
from workbench.ui.components import lenient
from workbench.ui.figures import analytics, replay
from workbench.ui.figures.common import TITLE_BELOW_TOOLBAR, run_label
from workbench.ui.reasons import known_texts
from workbench.ui.replay_js import STEP_JS
from workbench.ui.shared import (
    RUN_COLUMN_WIDTHS,
    TUNABLE,
    RunCache,
    decoder_for,
    error_md,
    run_id_of,
    runs_frame,
    shown_runs,
    step_of,
)

OPEN_OUTPUTS = len(TUNABLE) + 11  # ReplayHandlers.open's outputs: see replay_tab's open_outputs
# Heights (px) of the step's figure slots and node table, and of the run's figures: the tab fits in ~2,000 px.
# The node table: a 16-node tree's root, nodes and bonus row (18 rows of ~20 px and the header) without an inner scroll.
STEP_FIGURE_HEIGHT, NODES_HEIGHT, RUN_FIGURE_HEIGHT = 440, 392, 300
FOLLOW_SECONDS = 2.0  # how often a view of a run still being written asks whether it has finished


@dataclass
class RunPicker:
    """The stored runs, the run id and the step player."""

    filt: gr.Textbox
    refresh: gr.Button
    runs: gr.Dataframe
    run_id: gr.Number
    load: gr.Button
    play: gr.Button
    pause: gr.Button
    timer: gr.Timer
    step: gr.Slider
    share: gr.Button
    shared_md: gr.Markdown
    share_note: gr.Markdown | None = None  # single-user mode: why there is no Share button


@dataclass
class StepPanel:
    """What one step shows. From `data`, the run's step data, the browser (replay_js.STEP_JS) returns `outputs`,
    draws the figures and the table into the slots of `tree`, `thresholds` and `nodes` (the server never
    updates those), and cuts `text`, the run's whole text, at the step. /replay_step answers through
    `api_outputs` (step_outputs' order): hidden Plotly figures and node table, for API clients."""

    info: gr.Markdown
    text: gr.HTML
    tree: gr.HTML
    thresholds: gr.HTML
    nodes: gr.HTML
    data: gr.JSON
    api_figures: tuple[gr.Plot, gr.Plot]
    api_nodes: gr.Dataframe

    @property
    def outputs(self) -> list:
        return [self.info]

    @property
    def api_outputs(self) -> list:
        return [self.info, self.text, *self.api_figures, self.api_nodes]


@dataclass
class RunPanel:
    """The whole run's acceptance: by source and per draft position (drawn when a run loads)."""

    by_source: gr.Plot
    positions: gr.Plot

    @property
    def outputs(self) -> list:
        return [self.by_source, self.positions]


@dataclass
class TuningPanel:
    sliders: dict[str, gr.Slider]
    rule: gr.Dropdown
    summary: gr.Markdown
    flips: gr.Dataframe
    rerun: gr.Button
    original_text: gr.HTML
    rerun_text: gr.HTML
    rerun_md: gr.Markdown

    @property
    def inputs(self) -> list:
        """After the run id: the rule, then the sliders in TUNABLE order."""
        return [self.rule, *self.sliders.values()]


RUNS_LEGEND = (
    "<small>**method**: as asked (`aasd[auto]`: fitted thresholds) · **model**: the target model · **status**: complete, cancelled (Stop) or failed "
    "· **tokens**: tokens written · **MAL**: mean accepted length, tokens written per target forward (greedy: 1) · "
    "**tok/s**: tokens written per second of decoding (the prompt's reading excluded; wall clock, so a busy machine "
    "lowers it) · **tags**: `workbench` for the app's runs, the command line's `--tag` values for its own · **created**: "
    "UTC</small>"
)


def run_picker(store: Store, can_share: bool = True) -> RunPicker:
    with gr.Row():
        filt = gr.Textbox("", label="Filter runs (method, model, tag, status)", scale=3)
        refresh = gr.Button("Refresh", scale=1, elem_id="replay-refresh")
    runs = gr.Dataframe(
        shown_runs(runs_frame(store, viewer=NOBODY)),
        interactive=False,
        max_height=240,
        column_widths=RUN_COLUMN_WIDTHS,
        label="Stored runs (click a row to replay)",
        elem_id="replay-runs",
    )
    gr.Markdown(RUNS_LEGEND, elem_id="replay-runs-legend")
    with gr.Row():
        # Filled when the tab opens with the newest run this session may see (builder.newest_run_id)
        run_id = lenient(
            gr.Number(
                None,
                label="Run id",  # no precision=0: Gradio rounded a typed 2.5 to run 2; run_id_of refuses it in words
                scale=1,
                elem_id="replay-run-id",
                placeholder="no run yet: run a comparison, or type an id",
                info="opens on your newest run; click a row of the table to pick another",
            )
        )
        with gr.Column(scale=4):  # the buttons over the step slider, beside the run id: a shorter page
            with gr.Row():
                load = gr.Button("Load run", scale=1)
                play = gr.Button("▶ Play", scale=1)
                pause = gr.Button("Pause", scale=1)
                # single-user mode: every run is everyone's already, so there is nothing to share
                share = gr.Button("Share this run", scale=1, elem_id="replay-share", visible=can_share)
                # where the button would be, why it is not (a missing button left the user looking for it)
                share_note = None if can_share else gr.Markdown(SINGLE_USER_NOTE, elem_id="replay-share-note")
            # hidden (but in the page, for the browser's drawing) until a run is open: no 0–1 slider over nothing
            step = lenient(gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="replay-step", visible="hidden"))
    shared_md = gr.Markdown("", elem_id="share-status")
    timer = gr.Timer(0.6, active=False)
    return RunPicker(filt, refresh, runs, run_id, load, play, pause, timer, step, share, shared_md, share_note)


def step_panel() -> StepPanel:
    info = gr.Markdown("", elem_id="replay-info")
    text = gr.HTML("", elem_classes=["tokens"], elem_id="replay-text")
    with gr.Row():  # the figures carry their own titles: no component labels over them
        tree = gr.HTML(
            rv.slot_html(STEP_FIGURE_HEIGHT), label="Draft tree of this step", show_label=False, elem_id="replay-tree"
        )
        thresholds = gr.HTML(
            rv.slot_html(STEP_FIGURE_HEIGHT),
            label="p against the threshold (and the CSD gate)",
            show_label=False,
            elem_id="replay-thresholds",
        )
    nodes = gr.HTML(
        rv.slot_html(NODES_HEIGHT, rv.nodes_html_empty()),
        label="Nodes of this step",
        show_label=False,
        elem_id="replay-nodes",
    )
    data = gr.JSON(None, visible=False, elem_id="replay-data")
    api_figures = gr.Plot(visible=False), gr.Plot(visible=False)
    api_nodes = gr.Dataframe(rv.nodes_frame_empty(), headers=list(rv.NODE_COLUMNS), visible=False)
    return StepPanel(info, text, tree, thresholds, nodes, data, api_figures, api_nodes)


def run_panel() -> RunPanel:
    with gr.Row(elem_id="replay-run-figures"):  # the figures carry their own titles: no label chips over them
        by_source = gr.Plot(label="This run: node acceptance by source", show_label=False, elem_id="replay-by-source")
        positions = gr.Plot(
            label="This run: position acceptance per draft position", show_label=False, elem_id="replay-positions"
        )
    gr.Markdown(
        "  \n".join(analytics.acceptance_help(n) for n in (NODE_ACCEPTANCE, POSITION_ACCEPTANCE)),
        elem_id="replay-acceptance-help",
    )
    return RunPanel(by_source, positions)


def tuning_panel() -> TuningPanel:
    gr.Markdown("### Live tuning: re-score every stored step under new thresholds (no model)")
    with gr.Row():
        sliders = {}
        for name in TUNABLE:
            low, high, step = rv.slider_range(name)
            sliders[name] = lenient(
                gr.Slider(
                    low,
                    high,
                    value=PARAMS[name].default,
                    step=step,
                    label=rv.slider_label(name),
                    elem_id=f"tune-{name}",
                    elem_classes=["tune-slider"],  # tracks level at the bottom of each block whatever the label: CSS
                )
            )
    with gr.Row(equal_height=True):
        rule = gr.Dropdown(
            rv.rule_choices(),
            value=rv.OWN_RULE,
            scale=4,
            label="Judge with the rule of (same drafts; e.g. aasd-fixed to try CASD's δ on an AASD run)",
            elem_id="tune-rule",
        )
        rerun = gr.Button("Re-run with these settings", scale=1)
    summary = gr.Markdown("", elem_id="tune-summary")
    flips = gr.Dataframe(
        rv.flips_frame(None),
        headers=list(rv.FLIP_COLUMNS),
        interactive=False,
        # a flip's reason wraps to two or three lines: 260 px cut the third row of three (the twelfth fresh pass);
        # the first five or so show whole, and longer lists scroll
        max_height=480,
        # headers wrap at their spaces and the reason (a sentence) gets a third of the width: it ran off the table
        wrap=True,
        column_widths=["5%", "5%", "9%", "8%", "7%", "8%", "8%", "9%", "9%", "32%"],
        label="Decisions that flip (step, node, why)",
        elem_id="tune-flips",
    )
    with gr.Row():
        original_text = gr.HTML("", elem_classes=["tokens"], elem_id="rerun-original")
        rerun_text = gr.HTML("", elem_classes=["tokens"], elem_id="rerun-new")
    rerun_md = gr.Markdown("", elem_id="rerun-md")
    return TuningPanel(sliders, rule, summary, flips, rerun, original_text, rerun_text, rerun_md)


class ReplayHandlers:
    """The tab's event handlers; project errors come back as a message, never as an exception."""

    def __init__(self, store: Store, pool: service.ModelPool, cache: RunCache, who=lambda request: None):
        self.store, self.pool, self.cache, self.who = store, pool, cache, who
        self._runs: OrderedDict[int, dict] = OrderedDict()  # run id -> what _memo built for it
        self._lock = threading.Lock()

    def _text_of(self, trace):
        """id -> text for the run's model: the node records' texts, else its tokenizer (the loaded model's, else one
        read from disk the first time an id needs it: a tokenizer takes a second or two to load)."""

        def decode(ids):
            models = self.pool.loaded(trace.model)
            fn = models.target.tokenizer.decode if models is not None else decoder_for(trace.model)
            if fn is None:
                raise LookupError(trace.model)  # no tokenizer here: known_texts shows the id
            return fn(ids)

        return known_texts(trace, decode)

    def _memo(self, rid: int, stored, what: str, build):
        """`what` of run `rid` (its step data, its re-scoring inputs), built once while the run stays in the cache;
        a run the cache reloaded (its tags changed) is built again. The last four runs are kept."""
        with self._lock:
            entry = self._runs.get(rid)
            if entry is None or entry["stored"] is not stored:
                entry = self._runs[rid] = {"stored": stored}
            self._runs.move_to_end(rid)
            while len(self._runs) > 4:
                self._runs.popitem(last=False)
            value = entry.get(what)
        if value is None:
            value = entry[what] = build()
        return value

    def _step_data(self, rid: int, stored, ends) -> dict:
        """The run's step data (replay_view.step_data)."""
        return self._memo(
            rid, stored, "data", lambda: rv.step_data(rid, stored.trace, ends, self._text_of(stored.trace))
        )

    def open(self, request: gr.Request, rid):
        """Everything a newly chosen run shows, in one answer (open_outputs' order): the step slider sized to it, the
        status line, the tuning sliders set to its own values and greyed out where its method ignores them, the
        rule back to the run's own, its step data and whole text (the browser then draws step 0), the previous run's re-score and re-run cleared,
        and the tab's body shown."""
        cleared = ["", rv.flips_frame(None), "", "", ""]
        keep = [gr.update()] * len(TUNABLE)
        if rid is None:
            return (gr.update(), "type a run id or click a row", *keep, gr.update(), None, "", *cleared, None)
        try:
            rid = run_id_of(rid)
            stored, origins, ends = self.cache.get(rid, self.who(request))
        except WorkbenchError as e:  # the previous run is closed too (no step data: the browser empties the figures)
            closed = gr.update(value=0, visible="hidden")
            return (closed, error_md(e), *keep, gr.update(), None, "", *cleared, None)
        trace = stored.trace
        try:
            flags = rv.tuning_active(trace.method)
        except WorkbenchError:  # a method this server does not know: nothing to grey out
            flags = [True] * len(TUNABLE)
        labels = rv.slider_labels(trace)
        sliders = [
            gr.update(value=v, interactive=on, label=label)
            for v, on, label in zip(rv.tuning_values(trace), flags, labels)
        ]
        steps = len(trace.steps)  # fewer than two: no slider (Gradio refuses a slider whose maximum is its minimum)
        step = (
            gr.update(maximum=steps - 1, value=0, visible=True) if steps > 1 else gr.update(value=0, visible="hidden")
        )
        return (
            step,
            f"loaded run #{rid}",
            *sliders,
            rv.OWN_RULE,
            self._step_data(rid, stored, ends),
            tokens.tokens_html(origins),
            *cleared,
            rid,
        )

    def open_row(self, request: gr.Request, frame, evt: gr.SelectData):
        """A click on a row of the runs table: its run id and the run opened, in one round trip (open's outputs
        after the id; a separate round trip for the id alone cost ~100 ms of a ~500 ms click)."""
        try:
            rid = pick_row(frame, evt)
        except (IndexError, KeyError, TypeError, ValueError):  # a click on an emptied or re-sorted table
            return (gr.update(), *(gr.update(),) * OPEN_OUTPUTS)
        return (rid, *self.open(request, rid))

    def open_if_new(self, request: gr.Request, rid, opened):
        """The tab opening: the run id (the newest run, filled in by builder.newest_run_id) drawn unless it is the
        run already shown."""
        if rid is None or rid == opened:
            return (gr.update(),) * OPEN_OUTPUTS
        return self.open(request, rid)

    def follow(self, request: gr.Request, opened):
        """The follow timer on while the run shown is still being written (its header says so), off otherwise."""
        try:
            running = opened is not None and self.store.run_status(run_id_of(opened)) == "running"
        except WorkbenchError:
            running = False
        return gr.Timer(active=running)

    def finished(self, request: gr.Request, opened):
        """The follow timer's tick: once the run shown is no longer being written, its id (the tab then opens it
        again, whole) and the timer off; nothing while it is still running."""
        try:
            done = opened is None or self.store.run_status(run_id_of(opened)) != "running"
        except WorkbenchError:
            done = True
        if not done:
            return gr.skip(), gr.skip()
        return (gr.skip() if opened is None else opened), gr.Timer(active=False)

    def reopen(self, request: gr.Request, rid, k):
        """A followed run that finished, opened again whole at the step the user was on (open's outputs after the
        run id; open alone would go back to step 0)."""
        out = list(self.open(request, rid))
        slider = out[0]
        if isinstance(slider, dict) and "maximum" in slider:
            try:
                slider["value"] = min(step_of(k), slider["maximum"])
            except WorkbenchError:
                pass
        return (rid, *out)

    def step_data(self, request: gr.Request, rid):
        """The run's step data and whole text, sent once per load: the browser draws every step from them."""
        if rid is None:
            return None, ""
        try:
            rid = run_id_of(rid)
            stored, origins, ends = self.cache.get(rid, self.who(request))
        except WorkbenchError:
            return None, ""  # the load's status line already says why
        return self._step_data(rid, stored, ends), tokens.tokens_html(origins)

    def show_step(self, request: gr.Request, rid, k):
        if rid is None:
            return "choose a run", "", None, None, rv.nodes_frame_empty()
        try:
            rid = run_id_of(rid)
            stored, origins, ends = self.cache.get(rid, self.who(request))
            return rv.step_outputs(rid, stored.trace, origins, ends, k)
        except WorkbenchError as e:
            return error_md(e), "", None, None, rv.nodes_frame_empty()

    def active(self, request: gr.Request, rid, rule_choice):
        """Each tuning slider active where the judging method (the chosen rule's, else the run's) reads its
        parameter, greyed out where it does not, and labelled for that rule (a label saying "not used by aasd"
        beside an active δ that aasd-fixed's re-score reads contradicted it)."""
        keep = [gr.update()] * len(TUNABLE)
        if rid is None:
            return keep
        try:
            trace = self.cache.get(run_id_of(rid), self.who(request))[0].trace
            judge = rv.judge_of(rule_choice)
            flags = rv.tuning_active(judge or trace.method)
            labels = rv.slider_labels(trace, judge)
        except WorkbenchError:
            return keep
        return [gr.update(interactive=on, label=label) for on, label in zip(flags, labels)]

    def advance(self, request: gr.Request, k, rid):
        """The player's tick: the next step, or stop the timer at the last one."""
        if rid is None:
            return gr.update(), gr.Timer(active=False)
        try:
            stored, _, _ = self.cache.get(run_id_of(rid), self.who(request))
            nxt = rv.next_step(stored.trace, k)
        except WorkbenchError:
            return gr.update(), gr.Timer(active=False)
        return (gr.update(), gr.Timer(active=False)) if nxt is None else (nxt, gr.update())

    def run_figures(self, request: gr.Request, rid):
        """The loaded run's acceptance by source and per draft position."""
        if rid is None:
            return None, None
        try:
            rid = run_id_of(rid)
            stored, _, _ = self.cache.get(rid, self.who(request))
        except WorkbenchError:
            return None, None
        label = run_label(stored)  # "#7 aasd[auto]": the method as asked for, as the status line and Analytics say it
        figures = (
            analytics.accept_by_source_figure([(label, stored.trace)]),
            replay.position_figure(stored.trace, label),
        )
        for fig in figures:  # secondary to the step above: kept short; titles under Plotly's toolbar
            fig.update_layout(height=RUN_FIGURE_HEIGHT, margin={"t": 75, "b": 45}, title=TITLE_BELOW_TOOLBAR)
        return figures

    def tune(self, request: gr.Request, rid, rule_choice, delta, alpha, beta, tau, lam):
        """Re-score every stored step of the run under the sliders' values (no model): the summary and the flips."""
        values = (delta, alpha, beta, tau, lam)  # TUNABLE's order
        if rid is None:
            return "load a run first", rv.flips_frame(None)
        try:
            rid = run_id_of(rid)
            stored, _, _ = self.cache.get(rid, self.who(request))
            judge = rv.judge_of(rule_choice)
            params = rv.tuned_params(judge or stored.trace.method, values)
            inputs = self._memo(rid, stored, "inputs", lambda: prepare_run(stored.trace))
            result = rescore_run(stored.trace, params, rule=judge, inputs=inputs)
        except WorkbenchError as e:
            return error_md(e), rv.flips_frame(None)
        return rv.rescore_summary(result, params), rv.flips_frame(result, self._text_of(stored.trace))

    def rerun(self, request: gr.Request, rid, rule_choice, delta, alpha, beta, tau, lam, filter_text=""):
        """Run the model again with the sliders' values, store the run and show it beside the original; the runs
        table is listed again so the new run is in it."""
        values = (delta, alpha, beta, tau, lam)  # TUNABLE's order
        viewer = self.who(request)
        listed = shown_runs(runs_frame(self.store, filter_text, viewer=viewer))
        if rid is None:
            return "", "", "load a run first", listed
        try:
            rid = run_id_of(rid)
            stored, _, _ = self.cache.get(rid, viewer)
            trace = stored.trace
            method = rv.judge_of(rule_choice) or trace.method
            params = rv.rerun_params(trace, method, values)
            models = self.pool.load(trace.model, trace.draft_model)
            last = None
            for prog in service.stream_run(
                method,
                models,
                trace.prompt_ids,
                params,
                prompt_text=trace.prompt,
                context=trace.context,
                store=self.store,
                tags=("workbench", f"rerun-of-{rid}", *(viewer.run_tags if viewer else ())),
                slot=lambda should_stop: self.pool.slot(trace.model, should_stop),
            ):
                last = prog
        except WorkbenchError as e:
            return "", "", error_md(e), listed
        if last is None or last.error:
            return "", "", error_md(last.error if last else "the run produced nothing"), listed
        return (
            *rv.rerun_outputs(rid, trace, last.run, last.run_id, self.greedy_of(rid, trace, viewer)),
            shown_runs(runs_frame(self.store, filter_text, viewer=viewer)),
        )

    def greedy_of(self, rid: int, trace: RunTrace, viewer, limit: int = 50) -> tuple[int, RunTrace] | None:
        """(id, trace) of a stored greedy run of the same workload as run `rid` (replay_view.same_workload) that the
        viewer may see, the one of its own comparison first (replay_view.greedy_candidates); None when there is none
        among the newest `limit` greedy runs of the model with its token cap. A greedy run is its own reference."""
        if trace.method == "greedy":
            return rid, trace
        cap = trace.params.get("max_new_tokens")
        listed = self.store.list_runs(
            method="greedy",
            model=trace.model,
            status="complete",
            limit=limit,
            any_tag=viewer.visible_tags if viewer is not None else None,
        )
        ids = [r.id for r in listed if (r.params or {}).get("max_new_tokens") == cap]
        for gid in rv.greedy_candidates(rid, ids):
            greedy = self.store.load_run(gid, nodes=False).trace
            if rv.same_workload(trace, greedy):
                return gid, greedy
        return None

    def share(self, request: gr.Request, rid):
        """Tag the run `shared` (its owner only): every session can then list, replay and export it."""
        if rid is None:
            return "load a run first"
        viewer = self.who(request)
        if viewer is not None and viewer.owner is None:  # single-user mode (access.viewer_of): nothing to share
            return ALREADY_VISIBLE
        try:
            rid = run_id_of(rid)
            tags = self.store.run_tags(rid)
            if viewer is not None and not viewer.owns(tags):
                if viewer.can_see(tags):
                    return error_md(f"run #{rid} is someone else's: only its owner can share it")
                raise not_visible(rid, viewer)
            self.store.add_tags(rid, [SHARED_TAG])
        except WorkbenchError as e:
            return error_md(e)
        self.cache.forget(rid)
        return f"run #{rid} is shared: anyone using this app can see it"


# single-user mode's one sentence on sharing: the note where the Share button would be, and Share's answer (API)
ALREADY_VISIBLE = "single-user server: every run here is already visible to everyone who opens it, so nothing to share"
SINGLE_USER_NOTE = f"<small>{ALREADY_VISIBLE}</small>"


def pick_row(frame, evt: gr.SelectData) -> int:
    """The run id of the clicked row of the runs table."""
    row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    return int(frame.iloc[row]["id"])


@dataclass
class ReplayTab:
    """What the app wires from outside the tab: the runs table, its filter, the run id, and `open_new`, the
    chain of event arguments (`.then` after `.then`) that draws the run id's run when it is not the one shown
    (the tab's select)."""

    runs: gr.Dataframe
    filt: gr.Textbox
    run_id: gr.Number
    open_new: list[dict]


def replay_tab(
    store: Store, pool: service.ModelPool, cache: RunCache, who=lambda request: None, single_user: bool = False
) -> ReplayTab:
    """Build the tab and wire it."""
    picker = run_picker(store, can_share=not single_user)
    with gr.Column(
        elem_id="replay-body"
    ):  # shown once a step is drawn (builder.CSS): no empty page before a run is open
        panel = step_panel()
        whole = run_panel()
        tuning = tuning_panel()
    opened = gr.State(None)  # the run id shown now
    # a run opened while it is being written is followed: opened again, whole, when it finishes (seventeenth pass)
    follow = gr.Timer(FOLLOW_SECONDS, active=False)
    finished = gr.Number(None, visible=False)
    h = ReplayHandlers(store, pool, cache, who)
    open_outputs = [
        picker.step,
        panel.info,
        *tuning.sliders.values(),
        tuning.rule,
        panel.data,
        panel.text,
        tuning.summary,
        tuning.flips,
        tuning.original_text,
        tuning.rerun_text,
        tuning.rerun_md,
        opened,
    ]
    assert len(open_outputs) == OPEN_OUTPUTS
    # Drawn in the browser, never a progress overlay over the header it writes
    drawn = dict(
        fn=None, js=STEP_JS, inputs=[panel.data, picker.step, panel.info], outputs=panel.outputs, show_progress="hidden"
    )
    figures = dict(fn=h.run_figures, inputs=[picker.run_id], outputs=whole.outputs)
    followed = dict(fn=h.follow, inputs=[opened], outputs=[follow], show_progress="hidden")

    def listed(request: gr.Request, f):
        return shown_runs(runs_frame(store, f, viewer=who(request)))

    picker.refresh.click(listed, [picker.filt], [picker.runs], api_name="list_runs")
    picker.filt.submit(listed, [picker.filt], [picker.runs], api_name=False)
    # the runs table then shows the new tag (the eighteenth pass saw the sharer's own table still without it)
    picker.share.click(h.share, [picker.run_id], [picker.shared_md], api_name="share_run").then(
        listed, [picker.filt], [picker.runs], api_name=False, show_progress="hidden"
    )
    for opening in (picker.load.click, picker.run_id.submit, picker.runs.select):  # "is shared" was the last run's
        opening(lambda: "", None, [picker.shared_md], api_name=False, show_progress="hidden", queue=False)
    picker.runs.select(
        h.open_row, [picker.runs], [picker.run_id, *open_outputs], api_name=False, show_progress="hidden", queue=False
    ).then(**drawn, api_name=False).then(**figures, api_name=False).then(**followed, api_name=False)
    for start in (picker.load.click, picker.run_id.submit):
        start(
            h.open,
            [picker.run_id],
            open_outputs,
            api_name="load_run" if start == picker.load.click else False,
            show_progress="hidden",
        ).then(**drawn, api_name=False).then(**figures, api_name=False).then(**followed, api_name=False)
    follow.tick(h.finished, [opened], [finished, follow], api_name=False, show_progress="hidden")
    finished.change(
        h.reopen, [finished, picker.step], [picker.run_id, *open_outputs], api_name=False, show_progress="hidden"
    ).then(**drawn, api_name=False).then(**figures, api_name=False)
    gr.Button("Run figures", visible=False).click(**figures, api_name="run_figures")
    picker.step.change(**drawn, api_name=False, trigger_mode="always_last")  # in the browser: no round trip
    api_step = lenient(gr.Number(0, visible=False))  # any step: the slider's range is the browser's run
    gr.Button("Replay step", visible=False).click(
        h.show_step, [picker.run_id, api_step], panel.api_outputs, api_name="replay_step"
    )
    picker.play.click(lambda: gr.Timer(active=True), None, [picker.timer], api_name=False)
    picker.pause.click(lambda: gr.Timer(active=False), None, [picker.timer], api_name=False)
    picker.timer.tick(h.advance, [picker.step, picker.run_id], [picker.step, picker.timer], api_name=False)

    # .input, not .change: a run opening sets the sliders and the rule without re-scoring (its summary is cleared)
    tune_io = dict(fn=h.tune, inputs=[picker.run_id, *tuning.inputs], outputs=[tuning.summary, tuning.flips])
    for slider in tuning.sliders.values():
        slider.input(**tune_io, api_name=False, trigger_mode="always_last", show_progress="hidden", queue=False)
    active = dict(fn=h.active, inputs=[picker.run_id, tuning.rule], outputs=list(tuning.sliders.values()))
    tuning.rule.input(**tune_io, api_name=False)
    tuning.rule.input(**active, api_name=False)
    gr.Button("Re-score", visible=False).click(**tune_io, api_name="rescore")
    tuning.rerun.click(
        h.rerun,
        [picker.run_id, *tuning.inputs, picker.filt],
        [tuning.original_text, tuning.rerun_text, tuning.rerun_md, picker.runs],
        api_name="rerun",
        concurrency_id="generate",
    )
    # No progress overlay: it would write its timer into the step's header (an output) while the run opens
    open_new = [
        dict(fn=h.open_if_new, inputs=[picker.run_id, opened], outputs=open_outputs, show_progress="hidden"),
        drawn,
        figures,
        followed,
    ]
    return ReplayTab(picker.runs, picker.filt, picker.run_id, open_new)
