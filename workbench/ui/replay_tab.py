"""The Replay & tune tab: pick a stored run, step through it (text so far, draft tree, thresholds,
node table), re-score every stored step under new thresholds without the model, or re-run it.

Components are built by small functions, one per panel; the handlers are methods of ReplayHandlers
and turn replay_view's pure results into outputs. The session keeps only the run id.

Switching steps makes no round trip: loading a run sends its text and its step data once
(replay_view.step_data), and the slider's change runs replay_js.STEP_JS in the browser, which draws the
step's header, text cut, draft tree, threshold figure and node table (benchmarks/bench_replay_browser.py
times it). The API keeps /replay_step, answered by the server as before (Plotly figures, a node table)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import gradio as gr

from core.errors import WorkbenchError
from core.params import PARAMS
from workbench import service, views
from workbench.rescore import rescore_run
from workbench.store import Store
from workbench.ui import replay_view as rv
from workbench.ui.access import NOBODY, SHARED_TAG, not_visible
from workbench.ui.replay_js import STEP_JS
from workbench.ui.shared import TUNABLE, RunCache, error_md, runs_frame


# Heights (px) of the step's figure slots and node table, and of the run's figures: the tab fits in ~2,000 px.
STEP_FIGURE_HEIGHT, NODES_HEIGHT, RUN_FIGURE_HEIGHT = 440, 200, 300


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


def run_picker(store: Store) -> RunPicker:
    with gr.Row():
        filt = gr.Textbox("", label="Filter runs (method, model, tag, status)", scale=3)
        refresh = gr.Button("Refresh", scale=1)
    runs = gr.Dataframe(runs_frame(store, viewer=NOBODY), interactive=False, max_height=240, label="Stored runs (click a row to replay)")
    with gr.Row():
        # Filled when the tab opens with the newest run this session may see (builder.newest_run_id)
        run_id = gr.Number(None, label="Run id", precision=0, scale=1, elem_id="replay-run-id",
                           placeholder="no run yet: run a comparison, or type an id",
                           info="opens on your newest run; click a row of the table to pick another")
        with gr.Column(scale=4):  # the buttons over the step slider, beside the run id: a shorter page
            with gr.Row():
                load = gr.Button("Load run", scale=1)
                play = gr.Button("▶ Play", scale=1)
                pause = gr.Button("Pause", scale=1)
                share = gr.Button("Share this run", scale=1, elem_id="replay-share")
            step = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="replay-step")
    shared_md = gr.Markdown("", elem_id="share-status")
    timer = gr.Timer(0.6, active=False)
    return RunPicker(filt, refresh, runs, run_id, load, play, pause, timer, step, share, shared_md)


def step_panel() -> StepPanel:
    info = gr.Markdown("", elem_id="replay-info")
    text = gr.HTML("", elem_classes=["tokens"], elem_id="replay-text")
    with gr.Row():  # the figures carry their own titles: no component labels over them
        tree = gr.HTML(rv.slot_html(STEP_FIGURE_HEIGHT), label="Draft tree of this step", show_label=False,
                       elem_id="replay-tree")
        thresholds = gr.HTML(rv.slot_html(STEP_FIGURE_HEIGHT), label="p against the threshold (and the CSD gate)",
                             show_label=False, elem_id="replay-thresholds")
    nodes = gr.HTML(rv.slot_html(NODES_HEIGHT, rv.nodes_html_empty()), label="Nodes of this step", show_label=False,
                    elem_id="replay-nodes")
    data = gr.JSON(None, visible=False, elem_id="replay-data")
    api_figures = gr.Plot(visible=False), gr.Plot(visible=False)
    api_nodes = gr.Dataframe(rv.nodes_frame_empty(), headers=list(rv.NODE_COLUMNS), visible=False)
    return StepPanel(info, text, tree, thresholds, nodes, data, api_figures, api_nodes)


def run_panel() -> RunPanel:
    with gr.Row(elem_id="replay-run-figures"):  # the figures carry their own titles: no label chips over them
        by_source = gr.Plot(label="This run: acceptance by source", show_label=False, elem_id="replay-by-source")
        positions = gr.Plot(label="This run: acceptance per draft position", show_label=False,
                            elem_id="replay-positions")
    return RunPanel(by_source, positions)


def tuning_panel() -> TuningPanel:
    gr.Markdown("### Live tuning: re-score every stored step under new thresholds (no model)")
    with gr.Row():
        sliders = {}
        for name in TUNABLE:
            low, high, step = rv.slider_range(name)
            sliders[name] = gr.Slider(low, high, value=PARAMS[name].default, step=step, label=rv.slider_label(name),
                                      elem_id=f"tune-{name}")
    with gr.Row(equal_height=True):
        rule = gr.Dropdown(rv.rule_choices(), value=rv.OWN_RULE, scale=4,
                           label="Judge with the rule of (same drafts; e.g. aasd-fixed to try CASD's δ on an AASD run)",
                           elem_id="tune-rule")
        rerun = gr.Button("Re-run with these settings", scale=1)
    summary = gr.Markdown("", elem_id="tune-summary")
    flips = gr.Dataframe(rv.flips_frame(None), headers=list(rv.FLIP_COLUMNS), interactive=False, max_height=260,
                         label="Decisions that flip (step, node, why)", elem_id="tune-flips")
    with gr.Row():
        original_text = gr.HTML("", elem_classes=["tokens"])
        rerun_text = gr.HTML("", elem_classes=["tokens"])
    rerun_md = gr.Markdown("")
    return TuningPanel(sliders, rule, summary, flips, rerun, original_text, rerun_text, rerun_md)


class ReplayHandlers:
    """The tab's event handlers; project errors come back as a message, never as an exception."""

    def __init__(self, store: Store, pool: service.ModelPool, cache: RunCache, who=lambda request: None):
        self.store, self.pool, self.cache, self.who = store, pool, cache, who
        self._data: OrderedDict[int, tuple[object, dict]] = OrderedDict()  # run id -> (stored run, its step data)
        self._lock = threading.Lock()

    def step_data(self, request: gr.Request, rid):
        """The run's step data and whole text, sent once per load: the browser draws every step from them."""
        if rid is None:
            return None, ""
        try:
            stored, origins, ends = self.cache.get(int(rid), self.who(request))
        except WorkbenchError:
            return None, ""  # the load's status line already says why
        with self._lock:
            hit = self._data.get(int(rid))
        if hit is None or hit[0] is not stored:  # a run the cache reloaded (tags changed) is built again
            hit = (stored, rv.step_data(int(rid), stored.trace, ends))
            with self._lock:
                self._data[int(rid)] = hit
                while len(self._data) > 4:
                    self._data.popitem(last=False)
        return hit[1], views.tokens_html(origins)

    def show_step(self, request: gr.Request, rid, k):
        if rid is None:
            return "choose a run", "", None, None, rv.nodes_frame_empty()
        try:
            stored, origins, ends = self.cache.get(int(rid), self.who(request))
        except WorkbenchError as e:
            return error_md(e), "", None, None, rv.nodes_frame_empty()
        return rv.step_outputs(int(rid), stored.trace, origins, ends, k)

    def load(self, request: gr.Request, rid):
        """The step slider sized to the run, a status line, and the sliders set to the run's own values."""
        keep = [gr.update()] * len(TUNABLE)
        if rid is None:
            return gr.update(), "type a run id or click a row", *keep
        try:
            stored, _, _ = self.cache.get(int(rid), self.who(request))
        except WorkbenchError as e:
            return gr.update(), error_md(e), *keep
        steps = max(1, len(stored.trace.steps))
        values = [gr.update() if v is None else gr.update(value=v) for v in rv.tuning_values(stored.trace)]
        return gr.update(maximum=steps - 1, value=0), f"loaded run #{rid}", *values

    def active(self, request: gr.Request, rid, rule_choice):
        """Each tuning slider active where the judging method (the chosen rule's, else the run's) reads its
        parameter, greyed out where it does not."""
        keep = [gr.update()] * len(TUNABLE)
        if rid is None:
            return keep
        try:
            stored, _, _ = self.cache.get(int(rid), self.who(request))
            flags = rv.tuning_active(rv.judge_of(rule_choice) or stored.trace.method)
        except WorkbenchError:
            return keep
        return [gr.update(interactive=on) for on in flags]

    def advance(self, request: gr.Request, k, rid):
        """The player's tick: the next step, or stop the timer at the last one."""
        if rid is None:
            return gr.update(), gr.Timer(active=False)
        try:
            stored, _, _ = self.cache.get(int(rid), self.who(request))
        except WorkbenchError:
            return gr.update(), gr.Timer(active=False)
        nxt = rv.next_step(stored.trace, k)
        return (gr.update(), gr.Timer(active=False)) if nxt is None else (nxt, gr.update())

    def run_figures(self, request: gr.Request, rid):
        """The loaded run's acceptance by source and per draft position."""
        if rid is None:
            return None, None
        try:
            stored, _, _ = self.cache.get(int(rid), self.who(request))
        except WorkbenchError:
            return None, None
        label = f"#{int(rid)} {stored.trace.method}"
        figures = views.accept_by_source_figure([(label, stored.trace)]), views.position_figure(stored.trace, label)
        for fig in figures:  # secondary to the step above: kept short
            fig.update_layout(height=RUN_FIGURE_HEIGHT, margin={"t": 50, "b": 45})
        return figures

    def tune(self, request: gr.Request, rid, rule_choice, *values):
        if rid is None:
            return "load a run first", rv.flips_frame(None)
        try:
            stored, _, _ = self.cache.get(int(rid), self.who(request))
            judge = rv.judge_of(rule_choice)
            params = rv.tuned_params(judge or stored.trace.method, values)
            result = rescore_run(stored.trace, params, rule=judge)
        except WorkbenchError as e:
            return error_md(e), rv.flips_frame(None)
        return rv.rescore_summary(result, params), rv.flips_frame(result)

    def rerun(self, request: gr.Request, rid, rule_choice, *values):
        if rid is None:
            return "", "", "load a run first"
        viewer = self.who(request)
        try:
            stored, origins, _ = self.cache.get(int(rid), viewer)
            trace = stored.trace
            method = rv.judge_of(rule_choice) or trace.method
            params = rv.rerun_params(trace, method, values)
            models = self.pool.load(trace.model, trace.draft_model)
            last = None
            for prog in service.stream_run(method, models, trace.prompt_ids, params, prompt_text=trace.prompt,
                                           context=trace.context, store=self.store,
                                           tags=("workbench", f"rerun-of-{rid}", *(viewer.run_tags if viewer else ())),
                                           slot=lambda should_stop: self.pool.slot(trace.model, should_stop)):
                last = prog
        except WorkbenchError as e:
            return "", "", error_md(e)
        if last is None or last.error:
            return "", "", error_md(last.error if last else "the run produced nothing")
        return rv.rerun_outputs(int(rid), trace, origins, last.run, last.run_id)


def _share(self, request: gr.Request, rid):
    """Tag the run `shared` (its owner only): every session can then list, replay and export it."""
    if rid is None:
        return "load a run first"
    viewer = self.who(request)
    try:
        tags = self.store.run_tags(int(rid))
        if viewer is not None and not viewer.owns(tags):
            if viewer.can_see(tags):
                return error_md(f"run #{int(rid)} is someone else's: only its owner can share it")
            raise not_visible(int(rid))
        self.store.add_tags(int(rid), [SHARED_TAG])
    except WorkbenchError as e:
        return error_md(e)
    self.cache.forget(int(rid))
    return f"run #{int(rid)} is shared: anyone using this app can see it"


ReplayHandlers.share = _share


def pick_row(frame, evt: gr.SelectData) -> int:
    """The run id of the clicked row of the runs table."""
    row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    return int(frame.iloc[row]["id"])


def replay_tab(store: Store, pool: service.ModelPool, cache: RunCache, who=lambda request: None):
    """Build the tab and wire it; returns the runs table, its filter and the run id (refreshed when the tab opens)."""
    picker, panel = run_picker(store), step_panel()
    whole = run_panel()
    tuning = tuning_panel()
    h = ReplayHandlers(store, pool, cache, who)
    loaded = [picker.step, panel.info, *tuning.sliders.values()]
    sent = dict(fn=h.step_data, inputs=[picker.run_id], outputs=[panel.data, panel.text])
    drawn = dict(fn=None, js=STEP_JS, inputs=[panel.data, picker.step, panel.info], outputs=panel.outputs)

    def listed(request: gr.Request, f):
        return runs_frame(store, f, viewer=who(request))

    picker.refresh.click(listed, [picker.filt], [picker.runs], api_name="list_runs")
    picker.filt.submit(listed, [picker.filt], [picker.runs], api_name=False)
    picker.share.click(h.share, [picker.run_id], [picker.shared_md], api_name="share_run")
    figures = dict(fn=h.run_figures, inputs=[picker.run_id], outputs=whole.outputs)
    active = dict(fn=h.active, inputs=[picker.run_id, tuning.rule], outputs=list(tuning.sliders.values()))
    picker.runs.select(pick_row, [picker.runs], [picker.run_id], api_name=False).then(
        h.load, [picker.run_id], loaded, api_name=False).then(**active, api_name=False).then(
        **sent, api_name=False).then(**drawn, api_name=False).then(**figures, api_name=False)
    picker.load.click(h.load, [picker.run_id], loaded, api_name="load_run").then(**active, api_name=False).then(
        **sent, api_name=False).then(**drawn, api_name=False).then(**figures, api_name=False)
    gr.Button("Run figures", visible=False).click(**figures, api_name="run_figures")
    picker.step.change(**drawn, api_name=False, trigger_mode="always_last")  # in the browser: no round trip
    api_step = gr.Number(0, precision=0, visible=False)  # any step: the slider's range is the browser's run
    gr.Button("Replay step", visible=False).click(h.show_step, [picker.run_id, api_step], panel.api_outputs,
                                                   api_name="replay_step")
    picker.play.click(lambda: gr.Timer(active=True), None, [picker.timer], api_name=False)
    picker.pause.click(lambda: gr.Timer(active=False), None, [picker.timer], api_name=False)
    picker.timer.tick(h.advance, [picker.step, picker.run_id], [picker.step, picker.timer], api_name=False)

    tune_io = dict(fn=h.tune, inputs=[picker.run_id, *tuning.inputs], outputs=[tuning.summary, tuning.flips])
    for slider in tuning.sliders.values():
        slider.change(**tune_io, api_name=False, trigger_mode="always_last")
    tuning.rule.change(**tune_io, api_name=False)
    tuning.rule.change(**active, api_name=False)
    gr.Button("Re-score", visible=False).click(**tune_io, api_name="rescore")
    tuning.rerun.click(h.rerun, [picker.run_id, *tuning.inputs],
                       [tuning.original_text, tuning.rerun_text, tuning.rerun_md], api_name="rerun",
                       concurrency_id="generate")
    return picker.runs, picker.filt, picker.run_id
