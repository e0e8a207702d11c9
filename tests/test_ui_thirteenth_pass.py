"""The thirteenth newcomer pass, the parts that are not page behaviour (tests/test_browser_thirteenth_pass.py
watches the page). Each failed on the code before its fix."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from workbench.service import ModelPool
    from workbench.ui import build_app

    return build_app(db=str(tmp_path_factory.mktemp("db") / "t.db"), pool=ModelPool("cpu", "float32"))


def named(demo, name):
    (fn,) = [(i, f) for i, f in demo.fns.items() if getattr(f.fn, "__name__", "") == name]
    return fn


def test_run_is_greyed_out_before_the_comparison_and_back_after_it_however_it_ends(demo):
    """A second Run during a comparison was dropped without a word. Run now greys out ("Running…") in a step of
    its own before the comparison and comes back in one after it, chained with `.then` (not `.success`), so an
    error or a refusal brings it back too; `compare` keeps its API name for clients. Mutation caught: the
    comparison wired straight to the click again."""
    from workbench.ui.compare_tab import RUN_LABEL, RUNNING_LABEL, idle_button, running_button

    busy_id, busy = named(demo, "running_button")
    compare_id, compare = named(demo, "compare")
    _, idle = named(demo, "idle_button")
    assert compare.api_name == "compare" and compare.trigger_after == busy_id
    assert idle.trigger_after == compare_id and not idle.trigger_only_on_success
    assert [o.elem_id for o in busy.outputs] == ["compare-run", "compare-status"]
    assert [o.elem_id for o in idle.outputs] == ["compare-run"]
    assert not busy.queue  # answered at once, even while other sessions' comparisons hold the queue
    button, status = running_button()
    assert button == {"__type__": "update", "value": RUNNING_LABEL, "interactive": False}
    assert status == "starting your comparison…"  # not the last comparison's "done" (nineteenth pass)
    assert idle_button() == {"__type__": "update", "value": RUN_LABEL, "interactive": True}


def test_a_columns_head_is_its_title_and_its_notes_go_under_the_text_with_the_metrics():
    """The csd column's notes sat in its head, above its text (130 px below greedy's). Mutation caught: the notes
    back in the head (column_head), or values() dropping them."""
    from workbench.ui.compare_tab import SLOTS, ColumnsView, column_notes, column_title

    notes = column_notes("csd", "", "the table shipped for smollm2-135m, context drafts (1,330 observations, `t.gz`)")
    assert column_title("csd") == "### csd" and "no draft model" in notes and "the table shipped" in notes
    view = ColumnsView("", heads=["### greedy", "### csd"] + [""] * (SLOTS - 2), notes=["", notes] + [""] * (SLOTS - 2))
    view.metrics[0], view.metrics[1] = "MAL **1.00**", "MAL **1.85**"
    values = view.values()
    heads, metrics = values[2 : 2 + SLOTS], values[2 + SLOTS : 2 + 2 * SLOTS]
    assert heads[:2] == ["### greedy", "### csd"]
    assert metrics[0] == "MAL **1.00**" and metrics[1] == "MAL **1.85**\n\n" + notes
    before = ColumnsView("", notes=["", notes] + [""] * (SLOTS - 2)).values()  # before its metrics: the notes alone
    assert before[2 + SLOTS + 1] == notes


def test_a_columns_output_text_comes_before_its_metrics_on_the_page(demo):
    """The metrics (of lengths that differ from column to column) sat between the head and the text. Mutation
    caught: the metrics box back above the text box in build_form."""
    from workbench.ui.compare_tab import SLOTS

    columns = [b for b in demo.blocks.values() if "compare-col" in (getattr(b, "elem_classes", None) or [])]
    assert len(columns) == SLOTS
    for i, column in enumerate(columns):
        assert [c.elem_id for c in column.children] == [f"col-head-{i}", f"col-text-{i}", f"col-metrics-{i}"]
