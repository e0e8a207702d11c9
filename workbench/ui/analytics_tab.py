"""The Analytics tab: step lengths, acceptance by depth and by source, MAL and tokens/s, and a
parameter sweep, over chosen stored runs (by default the last comparison)."""
from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from core.errors import WorkbenchError
from core.trace import RunTrace
from workbench import views
from workbench.store import Store
from workbench.ui.access import NOBODY
from workbench.ui.shared import TUNABLE, RunCache, parse_run_ids, public_message, run_choices, run_colors

AUTO_SWEEP = "auto"


def labelled_traces(cache: RunCache, choice, last_comparison, viewer=None) -> list[tuple[str, RunTrace]]:
    """("#12 aasd", trace) of the chosen runs, or of the last comparison when none is chosen; a run that
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
        pairs.append((f"#{stored.id} {stored.trace.method}", stored.trace))
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


def shares(fig: go.Figure) -> go.Figure:
    """The tokens-per-step histogram as each run's share of its steps (runs of different lengths compare);
    views.accept_hist_figure puts that share, in %, in each bar's customdata."""
    for trace in fig.data:
        if trace.type == "bar" and trace.customdata is not None:
            counts = trace.y
            trace.update(y=[c / 100 for c in trace.customdata], customdata=counts,
                         hovertemplate=f"{trace.name}<br>%{{x}} tokens: %{{y:.1%}} of its steps (%{{customdata}} steps)<extra></extra>")
    fig.update_layout(yaxis={"title": "share of the run's steps", "tickformat": ".0%"})
    return fig


def restyled(fig: go.Figure, colors: dict[str, str]) -> go.Figure:
    """Each run in its colour (the same in every plot), the legend in a row above the plot (long run labels no
    longer cover the data) and room for bar labels (the tallest bar's number is not cut off)."""
    for trace in fig.data:
        if trace.name in colors:
            trace.update(marker_color=colors[trace.name])
            if trace.type == "scatter":
                trace.update(line_color=colors[trace.name])
        elif trace.type == "bar" and trace.x is not None and all(x in colors for x in trace.x):
            trace.update(marker_color=[colors[x] for x in trace.x])  # a bar per run (MAL and tokens/s)
        if trace.type == "bar" and trace.text is not None:
            trace.update(cliponaxis=False)
    fig.update_layout(legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
                      margin={"l": 60, "r": 20, "t": 90, "b": 60}, title={"y": 0.97, "yanchor": "top"})
    fig.update_yaxes(automargin=True)
    fig.update_xaxes(automargin=True)
    for axis in ("yaxis", "yaxis2"):  # headroom over the tallest labelled bar
        bars = [t for t in fig.data if t.type == "bar" and t.text is not None and (t.yaxis or "y") == axis.replace("axis", "")]
        tops = [v for t in bars for v in (t.y or ()) if v is not None]
        if tops:
            fig.update_layout({axis: {"range": [0, max(tops) * 1.18]}})
    return fig


def figures_of(pairs, param_choice) -> tuple[go.Figure, ...]:
    colors = run_colors([label for label, _ in pairs])
    param = sweep_param(param_choice, [t for _, t in pairs])
    sweep = views.sweep_figure(pairs, param)
    return (restyled(shares(views.accept_hist_figure(pairs)), colors), restyled(views.accept_by_depth_figure(pairs), colors),
            restyled(views.accept_by_source_figure(pairs), colors), restyled(views.runs_bar_figure(pairs), colors),
            restyled(sweep, run_colors([t.method for _, t in pairs])))


def analytics_tab(store: Store, cache: RunCache, compare_ids: gr.State, who) -> gr.Dropdown:
    """Build the tab; returns the run picker (refreshed when the tab opens)."""
    with gr.Row():
        chosen = gr.Dropdown(run_choices(store, NOBODY), multiselect=True, allow_custom_value=True,
                             label="Runs (empty: the last comparison)", scale=4, elem_id="analytics-runs")
        refresh = gr.Button("Refresh list", scale=1)
        draw = gr.Button("Draw", variant="primary", scale=1, elem_id="analytics-draw")
    # The figures carry their own titles: Gradio's label chip would sit on top of them.
    with gr.Row():
        hist = gr.Plot(show_label=False, elem_id="analytics-hist")
        by_depth = gr.Plot(show_label=False, elem_id="analytics-depth")
    with gr.Row():
        by_source = gr.Plot(show_label=False, elem_id="analytics-source")
        bars = gr.Plot(show_label=False, elem_id="analytics-bars")
    with gr.Row():
        param = gr.Dropdown([AUTO_SWEEP, *TUNABLE], value=AUTO_SWEEP, elem_id="analytics-sweep-param", scale=1,
                            label="Sweep parameter (auto: the one the runs vary, else the first their methods take)")
        sweep = gr.Plot(show_label=False, elem_id="analytics-sweep", scale=4)

    def figures(request: gr.Request, choice, last_comparison, param_choice):
        return figures_of(labelled_traces(cache, choice, last_comparison, who(request)), param_choice)

    def picks(request: gr.Request):
        return gr.Dropdown(choices=run_choices(store, who(request)))

    refresh.click(picks, None, [chosen], api_name=False)
    draw.click(figures, [chosen, compare_ids, param], [hist, by_depth, by_source, bars, sweep], api_name="analytics")
    return chosen
