"""Issue 33, sixth newcomer pass: the status line's method label, the speed chart's intervals, the diff's first
divergence, the re-score's reasons, the loaded run's settings, the task picker, the runs table's numbers."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from workbench import service


def _comparison(methods, specs):
    from workbench.ui.compare_tab import CompareRequest, Comparison

    req = CompareRequest("m", None, methods, "p", "", True, 8, {}, None, None, None, None, 1)
    c = Comparison(
        req,
        store=None,
        pool=None,
        tasks={},
        stop=threading.Event(),
        run_stop=threading.Event,
        owner_tags=(),
        where="here",
    )
    c.specs, c.per_method, c.n_repeats, c.max_new_tokens = specs, [{} for _ in specs], 1, 8
    c.models = SimpleNamespace(target=SimpleNamespace(tokenizer=None))
    return c


def test_the_status_line_names_the_method_as_its_column_does():
    """The column's head said aasd[auto] while the status line said "running aasd": the status uses the label the
    user chose."""
    from workbench.ui.compare_tab import ColumnsView, Place

    c = _comparison(["greedy", "aasd[auto]"], [("greedy", {}), ("aasd", {"fitted": "auto"})])
    c._stream = lambda name, slot: iter([service.Progress(name, [], prefill=(0, 10))])
    view = ColumnsView("")
    statuses = [v.status for v in c._column(view, 1, Place(2, 2, 1), SimpleNamespace(ids=None, tps=None))]
    assert statuses and all("**aasd[auto]**" in s for s in statuses), statuses
