"""The Analytics tab: step lengths, acceptance by depth and by source, MAL and tokens/s, and a
parameter sweep, over chosen stored runs (by default the last comparison)."""
from __future__ import annotations

import gradio as gr

from core.errors import WorkbenchError
from core.trace import RunTrace
from workbench import views
from workbench.store import Store
from workbench.ui.access import NOBODY
from workbench.ui.shared import TUNABLE, RunCache, parse_run_ids, public_message, run_choices


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


def analytics_tab(store: Store, cache: RunCache, compare_ids: gr.State, who) -> gr.Dropdown:
    """Build the tab; returns the run picker (refreshed when the tab opens)."""
    with gr.Row():
        chosen = gr.Dropdown(run_choices(store, NOBODY), multiselect=True, allow_custom_value=True,
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

    def figures(request: gr.Request, choice, last_comparison, param):
        pairs = labelled_traces(cache, choice, last_comparison, who(request))
        return (views.accept_hist_figure(pairs), views.accept_by_depth_figure(pairs), views.accept_by_source_figure(pairs),
                views.runs_bar_figure(pairs), views.sweep_figure(pairs, param))

    def picks(request: gr.Request):
        return gr.Dropdown(choices=run_choices(store, who(request)))

    refresh.click(picks, None, [chosen], api_name=False)
    draw.click(figures, [chosen, compare_ids, sweep_param], [hist, by_depth, by_source, bars, sweep], api_name="analytics")
    return chosen
