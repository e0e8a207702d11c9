"""The app: the tabs in one gr.Blocks, over one store, one model pool and one run cache."""

from __future__ import annotations

import signal
import threading
from typing import Any

import gradio as gr
import pandas as pd

from workbench import service
from workbench.store import Store
from workbench.ui.access import Viewer, viewer_of
from workbench.ui.analytics_tab import analytics_tab
from workbench.ui.compare_tab import compare_tab
from workbench.ui.corpus_view import corpus_models
from workbench.ui.diff_tab import diff_tab, picks_for
from workbench.ui.export_tab import export_tab
from workbench.ui.memory_tab import csd_choices, memory_tab
from workbench.ui.replay_tab import replay_tab
from workbench.ui.shared import RunCache, run_choices, runs_frame, shown_runs

CSS = """
input:disabled, textarea:disabled { opacity: 0.45; cursor: not-allowed; }  /* a parameter the chosen methods ignore */
.tokens { font-family: ui-monospace, monospace; font-size: 0.9em; line-height: 1.6; white-space: pre-wrap; }
/* Replay & tune: nothing but the run picker until a run's first step is drawn (its tree box is empty till then) */
#replay-body:has(#replay-tree .replay-slot:empty) { display: none; }
/* Compare: a column without a method (its head has no title) takes no width: three methods share the whole row */
.compare-col:not(:has(h3)) { display: none !important; }
/* Replay: a click on the runs table picks a row's run; Gradio's ring around the clicked cell (and its cell menu) said a
   single cell was chosen, or editable (the sixteenth fresh pass) */
#replay-runs .body-cell.cell-selected { box-shadow: none; }
#replay-runs .cell-menu-button { display: none !important; }
/* Gradio 6 draws that ring on the cell's text span, and move handles beside it (the twenty-first pass) */
#replay-runs .cell-selected .text { box-shadow: none !important; }
#replay-runs .selection-button { display: none !important; }
/* Compare: the speed table's columns are shares of its width (column_widths), so a long method label no longer pushes
   speed-up and MAL out of view (the twenty-second pass); the label is cut with an ellipsis (Gradio's default) and a
   number too wide for its column, a mean with its interval, wraps onto a second line instead of being cut */
#compare-speed-table .body-cell:not(.first-column) .cell-wrap > span.text {
  white-space: normal; overflow-wrap: anywhere; text-overflow: clip; overflow: visible;
}
/* Replay: the live-tuning sliders' labels wrap to one, two or three lines beside their number boxes, which left the
   five tracks at three heights (the twenty-second pass): each slider is a column with its track at the bottom */
.tune-slider { display: flex; flex-direction: column; }
.tune-slider > .wrap:has(> .slider_input_container) { flex: 1 1 auto; display: flex; flex-direction: column; }
.tune-slider .slider_input_container { margin-top: auto; }
"""


def build_app(
    db: str | None = None,
    pool: service.ModelPool | None = None,
    queue_size: int = 32,
    single_user: bool = False,
    allow_local_models: bool = False,
) -> gr.Blocks:
    """The workbench on the store at `db` (see workbench.store.resolve_url); `demo.store` is that store.

    Runs made in the app belong to the browser session that made them and are seen by others only once
    shared (workbench/ui/access.py); `single_user=True` shows every run in the store to everyone. The model boxes
    take presets and hub ids only, unless `single_user` or `allow_local_models` (then local folders and .gguf
    files too): a visitor of a shared app cannot make it open paths on the server (service.check_model_access)."""
    store = Store(db)
    pool = pool or service.ModelPool()
    pool.allow_local = single_user or allow_local_models
    cache = RunCache(store)

    def who(request: gr.Request | None) -> Viewer:
        return viewer_of(request, single_user)

    where = store.where if single_user else "this server's trace store"
    with gr.Blocks(title="Speculative decoding workbench") as demo:
        gr.Markdown(
            "## Speculative decoding workbench\nGreedy, AASD, CSD and friends side by side; every step kept, "
            "replayable and re-scorable. Runs are stored in "
            + (
                f"`{where}`."
                if single_user
                else f"{where}; yours are visible only to this browser session until you share them (Replay & tune)."
            )
        )
        compare_ids = gr.State([])  # the run ids of this session's last comparison: the only session state
        with gr.Tabs():
            with gr.Tab("Compare"):
                compare = compare_tab(store, pool, compare_ids, who)
            with gr.Tab("Replay & tune") as replay:
                replay_parts = replay_tab(store, pool, cache, who, single_user=single_user)
            with gr.Tab("Diff", elem_id="tab-diff") as diff:
                diff_a, diff_b = diff_tab(store, cache, who, compare_ids, pool)
            with gr.Tab("CSD memory", elem_id="tab-memory") as memory:
                memory_pick, corpus_pick = memory_tab(store, cache, compare_ids, who)
            with gr.Tab("Analytics") as analytics:
                analytics_pick = analytics_tab(store, cache, compare_ids, who)
            with gr.Tab("Export") as export:
                export_pick = export_tab(store, cache, compare_ids, who)
            # report --frontier's results, drawn (figures/frontier.py)
            with gr.Tab("Frontier", elem_id="tab-frontier") as frontier:
                from workbench.ui.figures.frontier import FRONTIER_INTRO, WORST, frontier_view

                gr.Markdown(FRONTIER_INTRO, elem_id="frontier-intro")
                with gr.Row():
                    frontier_path = gr.Textbox("results/frontier", label="report --frontier's --out folder", scale=3)
                    frontier_family = gr.Textbox(WORST, label="family on the x axis (or 'worst family')", scale=2)
                    frontier_draw = gr.Button("Draw", scale=1)
                frontier_plot, frontier_table = gr.Plot(), gr.Markdown()
                frontier_draw.click(
                    frontier_view, [frontier_path, frontier_family], [frontier_plot, frontier_table], api_name=False
                )
                # Opening the tab draws the frontier there is, or says there is none yet (an empty plot until Draw
                # said nothing)
                frontier.select(
                    frontier_view, [frontier_path, frontier_family], [frontier_plot, frontier_table], api_name=False
                )

        # Lists of stored runs are read when their tab opens, so they include the runs made since.
        def listed(f, rid, request: gr.Request):
            """The runs table, and the run id set to the newest visible run while it is empty."""
            frame = runs_frame(store, f, viewer=who(request))
            rid_now = newest_run_id(frame, rid)
            return shown_runs(frame), gr.update() if rid_now == rid else rid_now  # a chosen run is left as it is

        def picks(request: gr.Request):
            return gr.Dropdown(choices=run_choices(store, who(request)))

        # Opening the tab lists the runs, fills in the newest and draws it (unless it is the run shown already).
        event = replay.select(
            listed, [replay_parts.filt, replay_parts.run_id], [replay_parts.runs, replay_parts.run_id], api_name=False
        )
        for step in replay_parts.open_new:
            event = event.then(**step, api_name=False)

        def two_picks(request: gr.Request, ids, a_now, b_now):
            return picks_for(run_choices(store, who(request)), ids, a_now, b_now)

        diff.select(two_picks, [compare_ids, diff_a, diff_b], [diff_a, diff_b], api_name=False)

        def memory_picks(request: gr.Request):
            viewer = who(request)
            return gr.Dropdown(choices=csd_choices(store, viewer)), gr.Dropdown(choices=corpus_models(store, viewer))

        memory.select(memory_picks, None, [memory_pick, corpus_pick], api_name=False)
        for tab, pick in ((analytics, analytics_pick), (export, export_pick)):
            tab.select(picks, None, [pick], api_name=False)
        demo.load(**compare.on_load)  # the default sample's token count and reading time
    # One generation per loaded model at a time (ModelPool's semaphores); other events stay responsive.
    demo.queue(max_size=queue_size, default_concurrency_limit=4)
    demo.store, demo.pool, demo.single_user = store, pool, single_user
    return demo


def newest_run_id(frame, current):
    """The run id the replay shows: the one typed or picked, else the newest listed run with steps to draw, else the
    newest listed run, else empty (the field's placeholder then says how to get one). 0 counts as empty: an empty
    number field sends 0, and stored run ids start at 1. A run cancelled or failed before its first token is
    skipped: the thirteenth fresh pass opened the tab on one ("nothing to replay", an empty tree) above complete runs."""
    if current not in (None, "", 0) and not (isinstance(current, float) and current != current):
        return current
    if not len(frame):
        return None
    drawable = frame[~nothing_written(frame)] if {"status", "tokens"} <= set(frame.columns) else frame
    return int((drawable if len(drawable) else frame)["id"].max())


def nothing_written(frame):
    """Which runs_frame rows are runs stopped (cancelled or failed) before they wrote a token: a replay of one says
    "nothing to replay". A running run's tokens are not counted yet (None), so it is not one of them."""
    tokens = pd.to_numeric(frame["tokens"], errors="coerce").fillna(0)
    return frame["status"].isin(("cancelled", "failed")) & (tokens <= 0)


# Gradio names a multiselect token's remove button "Remove <the choice's index>" ("Remove 0", "Remove 14"): name the
# token instead, for screen readers and the tooltip. Run once when the page loads (launch's js).
PAGE_JS = """
() => {
  const name = () => document.querySelectorAll('.token-remove').forEach((button) => {
    const label = button.parentElement && button.parentElement.querySelector('span');
    const text = label ? label.textContent.trim() : '';
    const want = `Remove ${text}`;
    if (text && button.getAttribute('title') !== want) {
      button.setAttribute('title', want);
      button.setAttribute('aria-label', want);
    }
  });
  new MutationObserver(name).observe(document.body, {childList: true, subtree: true, attributes: true,
                                                     attributeFilter: ['title']});
  name();
  // Plotly follows a window resize only while its figure is shown: a window resized on another tab left the figures
  // of this one at their old width, cut at the right (nineteenth newcomer pass). Opening a tab lays them out again.
  document.addEventListener('click', (event) => {
    if (event.target.closest && event.target.closest('[role=tab]')) {
      requestAnimationFrame(() => requestAnimationFrame(() => window.dispatchEvent(new Event('resize'))));
    }
  });
}
"""
# Gradio's footer also links "Runs", its own history of this browser's calls, which is not the app's stored runs
# (Replay & tune lists those): left out.
FOOTER_LINKS = ["api", "gradio", "settings"]


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # Gradio's blocking loop closes the server on it; the interpreter then runs atexit


# Gradio 6's status tracker announces a finished event to screen readers (an sr-only aria-live region) as
# i18n("common.complete"), a key its own English table lacks, so the key itself was read out; the app supplies it.
SCREEN_READER_TEXTS = gr.I18n(en={"common.complete": "done"})


def launch(demo: gr.Blocks, **kwargs: Any):
    """Serve the app. A server that blocks in the main thread ends on SIGTERM (`kill`, systemd, `docker stop`) as on
    Ctrl-C, so the exit hooks save what it learned: an online CSD memory, the suffix corpus. Python's default for
    SIGTERM skips them, and the eighteenth newcomer pass lost an online memory that way."""
    if not kwargs.get("prevent_thread_lock") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    return demo.launch(css=CSS, js=PAGE_JS, footer_links=FOOTER_LINKS, i18n=SCREEN_READER_TEXTS, **kwargs)
