"""The Analytics tab: step lengths, acceptance by depth and by source, MAL and tokens/s, and a
parameter sweep, over chosen stored runs (by default the last comparison)."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from core.errors import WorkbenchError
from core.trace import RunTrace
from workbench.store import Store
from workbench.ui.access import NOBODY
from workbench.ui.figures import analytics as af
from workbench.ui.shared import (
    RUN_PICKER_HELP,
    TUNABLE,
    RunCache,
    asked_as,
    method_colors,
    parse_run_ids,
    public_message,
    run_choices,
)

AUTO_SWEEP = "auto"


def labelled_traces(cache: RunCache, choice, last_comparison, viewer=None) -> list[tuple[str, RunTrace]]:
    """("#12 aasd", trace) of the chosen runs (the method as the run was asked for: "#13 aasd[auto]"), or of the last comparison when none is chosen; a run that
    cannot be read is left out with a warning."""
    try:
        ids = parse_run_ids(choice or last_comparison)
    except WorkbenchError as e:
        gr.Warning(str(e))
        ids = []
    pairs = []
    for i in ids:
        try:
            stored = cache.get(i, viewer)[0]
        except WorkbenchError as e:
            gr.Warning(public_message(str(e)))
            continue
        pairs.append((f"#{stored.id} {asked_as(stored.trace.method, stored.trace.params)}", stored.trace))
    return pairs


def sweep_param(choice: str | None, traces) -> str:
    """The parameter to sweep: the one chosen, or under auto the tunable parameter whose value differs among the
    runs (a stored sweep), else the first one the runs' methods record (α for the default comparison's aasd)."""
    if choice in TUNABLE:
        return choice
    values = {p: {t.params.get(p) for t in traces if t.params.get(p) is not None} for p in TUNABLE}
    varied = [p for p in TUNABLE if len(values[p]) > 1]
    taken = [p for p in TUNABLE if values[p]]
    return (varied or taken or ["alpha"])[0]


def figures_of(pairs, param_choice) -> tuple[go.Figure, ...]:
    """The tab's five figures; runs coloured by their method (three methods, three colours, however many runs)."""
    colors = method_colors([label for label, _ in pairs])
    param = sweep_param(param_choice, [t for _, t in pairs])
    sweep = af.sweep_figure(pairs, param)
    return (
        af.restyled(af.shares(af.accept_hist_figure(pairs)), colors),
        af.restyled(af.accept_by_depth_figure(pairs), colors),
        af.restyled(af.accept_by_source_figure(pairs), colors),
        af.restyled(af.runs_bar_figure(pairs), colors),
        af.restyled(sweep, method_colors([asked_as(t.method, t.params, leave_out=(param,)) for _, t in pairs])),
    )


def analytics_tab(store: Store, cache: RunCache, compare_ids: gr.State, who) -> gr.Dropdown:
    """Build the tab; returns the run picker (refreshed when the tab opens)."""
    with gr.Row():
        chosen = gr.Dropdown(
            run_choices(store, NOBODY),
            multiselect=True,
            allow_custom_value=True,
            label="Runs (empty: the last comparison)",
            info=RUN_PICKER_HELP,
            scale=4,
            elem_id="analytics-runs",
        )
        refresh = gr.Button("Refresh list", scale=1)
        draw = gr.Button("Draw", variant="primary", scale=1, elem_id="analytics-draw")
    # The figures carry their own titles: Gradio's label chip would sit on top of them.
    gr.Markdown(af.acceptance_help(af.NODE_ACCEPTANCE), elem_id="analytics-acceptance-help")
    with gr.Row():
        hist = gr.Plot(show_label=False, elem_id="analytics-hist")
        by_depth = gr.Plot(show_label=False, elem_id="analytics-depth")
    with gr.Row():
        by_source = gr.Plot(show_label=False, elem_id="analytics-source")
        bars = gr.Plot(show_label=False, elem_id="analytics-bars")
    with gr.Row():
        param = gr.Dropdown(
            [AUTO_SWEEP, *TUNABLE],
            value=AUTO_SWEEP,
            elem_id="analytics-sweep-param",
            scale=1,
            label="Sweep parameter (auto: the one the runs vary, else the first their methods take)",
        )
        sweep = gr.Plot(show_label=False, elem_id="analytics-sweep", scale=4)

    def figures(request: gr.Request, choice, last_comparison, param_choice):
        return figures_of(labelled_traces(cache, choice, last_comparison, who(request)), param_choice)

    def picks(request: gr.Request):
        return gr.Dropdown(choices=run_choices(store, who(request)))

    refresh.click(picks, None, [chosen], api_name=False)
    draw.click(figures, [chosen, compare_ids, param], [hist, by_depth, by_source, bars, sweep], api_name="analytics")
    return chosen
