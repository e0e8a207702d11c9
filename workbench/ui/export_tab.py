"""The Export tab: chosen stored runs (by default the last comparison) as runs.csv, steps.csv and
nodes.csv in one zip."""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

import gradio as gr

from core.errors import WorkbenchError
from workbench.store import RunNotFoundError, Store
from workbench.ui.access import NOBODY, Viewer, not_visible
from workbench.ui.shared import RUN_PICKER_HELP, error_md, parse_run_ids, run_choices


def export_zip(store: Store, choice, last_comparison, viewer: Viewer | None = None) -> tuple[str | None, str]:
    """(path of the zip or None, a status line); only runs `viewer` may see are exported."""
    try:
        ids = parse_run_ids(choice or last_comparison)
        if viewer is not None:
            for i in ids:
                try:
                    viewer.check(i, store.run_tags(i))
                except RunNotFoundError:
                    raise not_visible(i, viewer) from None
    except WorkbenchError as e:
        return None, error_md(e)
    if not ids:
        return None, error_md("choose runs to export (or run a comparison first)")
    out = Path(tempfile.mkdtemp(prefix="workbench-export-"))
    try:
        files = store.export_csv(ids, out)
    except WorkbenchError as e:
        return None, error_md(e)
    zpath = out / zip_name(ids)
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files.values():
            z.write(f, f.name)
    return str(zpath), f"exported {len(ids)} run(s): {', '.join(f.name for f in files.values())}"


def zip_name(ids) -> str:
    """The zip's name from the run ids it holds, runs of consecutive ids as ranges: runs-11-19.zip for runs 11 to 19,
    runs-3_7-9.zip for 3, 7, 8, 9; too many ranges for a file name: runs-3-to-40-12-runs.zip."""
    ordered = sorted(set(int(i) for i in ids))
    ranges, start = [], None
    for k, i in enumerate(ordered):
        start = i if start is None else start
        if k + 1 == len(ordered) or ordered[k + 1] != i + 1:
            ranges.append(f"{start}" if start == i else f"{start}-{i}")
            start = None
    name = "_".join(ranges)
    if len(name) > 40:
        name = f"{ordered[0]}-to-{ordered[-1]}-{len(ordered)}-runs"
    return f"runs-{name}.zip"


def export_tab(store: Store, cache, compare_ids: gr.State, who) -> gr.Dropdown:
    """Build the tab; returns the run picker (refreshed when the tab opens)."""
    with gr.Row():
        chosen = gr.Dropdown(
            run_choices(store, NOBODY),
            multiselect=True,
            allow_custom_value=True,
            label="Runs to export (empty: the last comparison)",
            info=RUN_PICKER_HELP,
            scale=4,
            elem_id="export-runs",
        )
        refresh = gr.Button("Refresh list", scale=1)
        export_btn = gr.Button("Export CSV (zip)", variant="primary", scale=1)
    file = gr.File(label="runs.csv, steps.csv and nodes.csv", elem_id="export-file")
    note = gr.Markdown("")

    def picks(request: gr.Request):
        return gr.Dropdown(choices=run_choices(store, who(request)))

    def export(request: gr.Request, choice, last):
        return export_zip(store, choice, last, who(request))

    refresh.click(picks, None, [chosen], api_name=False)
    export_btn.click(export, [chosen, compare_ids], [file, note], api_name="export")
    return chosen
