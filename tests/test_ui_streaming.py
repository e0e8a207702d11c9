"""What a comparison sends the page while it streams (issue 33, fifth newcomer pass): the speed chart and table are
serialised when they change, not with every progress update (each cost 20-85 ms of Python on the core the
decoding shares)."""

from __future__ import annotations

from core.errors import InvalidInputError
from workbench.ui.compare_tab import ColumnsView, StatusOnly, refusal
from workbench.ui.figures.common import empty_figure


def _chart_and_table(values: list) -> tuple:
    return values[-3], values[-2]


def _unchanged(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def test_the_chart_and_table_go_to_the_page_only_when_they_change():
    view = ColumnsView("running greedy…")
    first = _chart_and_table(view.values())
    assert not any(_unchanged(v) for v in first)  # the first update draws the empty chart and table
    for tokens in range(1, 30):  # progress updates: the status and the column's text change, nothing else
        view.status, view.texts[0] = f"{tokens} of 64 tokens", "x" * tokens
        values = view.values()
        assert values[0] == f"{tokens} of 64 tokens"
        assert all(_unchanged(v) for v in _chart_and_table(values))
    view.figure, view.table = empty_figure("speeds"), [["greedy", 1.0]]  # a method finished: new chart and table
    figure, table = _chart_and_table(view.values())
    assert figure is view.figure and table is view.table
    assert all(_unchanged(v) for v in _chart_and_table(view.values()))
    view.table = [["greedy", 1.0], ["aasd", 1.2]]  # only the table changed: it goes, and the chart with it
    assert _chart_and_table(view.values())[1] is view.table
    view.closing = True  # the last update sends everything, so an API client's final result is whole
    figure, table = _chart_and_table(view.values())
    assert figure is view.figure and table is view.table


def test_a_status_before_anything_runs_leaves_the_last_comparison_on_screen():
    """Eighteenth newcomer pass: a Run refused for a mistyped model wiped the last comparison's columns, chart and
    table, with nothing to bring them back. "loading…" and a refusal now send the status alone (the comparison's
    first view, above, is what clears the columns), and a refusal says whose results stay below it."""
    values = StatusOnly("loading…").values()
    assert len(values) == len(ColumnsView("").values())
    assert values[0] == "loading…" and all(_unchanged(v) for v in values[1:])
    note = refusal(InvalidInputError("no such model"), [7, 8, 9]).status
    assert (
        "no such model" in note
        and "Nothing ran: the columns below are as they were (the last comparison's runs #7, #8, #9 stay stored)"
        in note
    )
    assert "Nothing ran" not in refusal(InvalidInputError("no such model"), None).status  # no comparison yet
