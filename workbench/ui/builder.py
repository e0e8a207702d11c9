"""The app: the four tabs in one gr.Blocks, over one store, one model pool and one run cache."""
from __future__ import annotations

from typing import Any

import gradio as gr

from workbench import service
from workbench.store import Store
from workbench.ui.analytics_tab import analytics_tab
from workbench.ui.compare_tab import compare_tab
from workbench.ui.export_tab import export_tab
from workbench.ui.replay_tab import replay_tab
from workbench.ui.shared import RunCache, run_choices, runs_frame

CSS = """
.tokens { font-family: ui-monospace, monospace; font-size: 0.9em; line-height: 1.6; white-space: pre-wrap; }
"""


def build_app(db: str | None = None, pool: service.ModelPool | None = None, queue_size: int = 32) -> gr.Blocks:
    """The workbench on the store at `db` (see workbench.store.resolve_url); `demo.store` is that store."""
    store = Store(db)
    pool = pool or service.ModelPool()
    cache = RunCache(store)
    with gr.Blocks(title="Speculative decoding workbench") as demo:
        gr.Markdown("## Speculative decoding workbench\nGreedy, AASD, CSD and friends side by side; every step kept, "
                    "replayable and re-scorable. Runs are stored in " + f"`{store.where}`.")
        compare_ids = gr.State([])  # the run ids of this session's last comparison: the only session state
        with gr.Tabs():
            with gr.Tab("Compare"):
                compare_tab(store, pool, compare_ids)
            with gr.Tab("Replay & tune") as replay:
                runs, filt = replay_tab(store, pool, cache)
            with gr.Tab("Analytics") as analytics:
                analytics_pick = analytics_tab(store, cache, compare_ids)
            with gr.Tab("Export") as export:
                export_pick = export_tab(store, compare_ids)
        # Lists of stored runs are read when their tab opens, so they include the runs made since.
        replay.select(lambda f: runs_frame(store, f), [filt], [runs], api_name=False)
        for tab, pick in ((analytics, analytics_pick), (export, export_pick)):
            tab.select(lambda: gr.Dropdown(choices=run_choices(store)), None, [pick], api_name=False)
    # One generation per loaded model at a time (ModelPool's semaphores); other events stay responsive.
    demo.queue(max_size=queue_size, default_concurrency_limit=4)
    demo.store = store
    return demo


def launch(demo: gr.Blocks, **kwargs: Any):
    return demo.launch(css=CSS, **kwargs)
