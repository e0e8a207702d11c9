"""The Analytics tab: step lengths, acceptance by depth and by source, MAL and tokens/s, and a
parameter sweep, over chosen stored runs (by default the last comparison)."""
from __future__ import annotations

import gradio as gr

from core.errors import WorkbenchError
from core.trace import RunTrace
from workbench import views
from workbench.store import Store
from workbench.ui.shared import TUNABLE, RunCache, parse_run_ids, run_choices


def labelled_traces(cache: RunCache, choice, last_comparison) -> list[tuple[str, RunTrace]]:
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
            stored = cache.get(i)[0]
        except WorkbenchError as e:
            gr.Warning(str(e))
            continue
        pairs.append((f"#{stored.id} {stored.trace.method}", stored.trace))
    return pairs


def analytics_tab(store: Store, cache: RunCache, compare_ids: gr.State) -> gr.Dropdown:
    """Build the tab; returns the run picker (refreshed when the tab opens)."""
    with gr.Row():
        chosen = gr.Dropdown(run_choices(store), multiselect=True, allow_custom_value=True,
                             label="Runs (empty: the last comparison)", scale=4)
        refresh = gr.Button("Refresh list", scale=1)
        draw = gr.Button("Draw", variant="primary", scale=1)
    with gr.Row():
        hist, by_depth = gr.Plot(label="Tokens per step"), gr.Plot(label="Acceptance by depth")
    with gr.Row():
        by_source, bars = gr.Plot(label="Acceptance by source"), gr.Plot(label="MAL and tokens/s")
    with gr.Row():
        sweep_param = gr.Dropdown(list(TUNABLE), value="delta", label="Sweep parameter", scale=1)
        sweep = gr.Plot(label="MAL against the parameter, per method (the chosen runs, e.g. a stored bench sweep)", scale=4)

    def figures(choice, last_comparison, param):
        pairs = labelled_traces(cache, choice, last_comparison)
        return (views.accept_hist_figure(pairs), views.accept_by_depth_figure(pairs), views.accept_by_source_figure(pairs),
                views.runs_bar_figure(pairs), views.sweep_figure(pairs, param))

    refresh.click(lambda: gr.Dropdown(choices=run_choices(store)), None, [chosen], api_name=False)
    draw.click(figures, [chosen, compare_ids, sweep_param], [hist, by_depth, by_source, bars, sweep], api_name="analytics")
    return chosen
