"""What every figure shares: decision colours and source shapes, the blank figure that says why it is blank,
run labels, and Plotly figures built from plain dicts without validation (for figures redrawn per step)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from workbench.ui.shared import asked_as

DECISION_COLORS: dict[str, str] = {
    "root": "#000000",
    "accepted": "#2ca02c",
    "rejected": "#d62728",
    "rescued": "#ff7f0e",
    "unreached": "#9e9e9e",
    "bonus": "#1f77b4",
}


SOURCE_SYMBOLS: dict[str, str] = {
    "root": "circle",
    "context": "square",
    "generated": "diamond",
    "alignment": "triangle-up",
    "draft": "hexagon",
    "recycled": "pentagon",
    "model": "star",
}


NO_RUNS = "no runs selected"
# A figure title under Plotly's toolbar (the mode bar, ~30 px at the top right, shown on hover), left-aligned
# with the plot: centred titles ran under the toolbar. Figures that use it keep a top margin of ≥ 70 px.
TITLE_BELOW_TOOLBAR = {
    "x": 0,
    "xref": "paper",
    "xanchor": "left",
    "y": 1,
    "yref": "container",
    "yanchor": "top",
    "pad": {"t": 34},
}


def empty_figure(message: str = NO_RUNS) -> go.Figure:
    """A blank figure that says why it is blank (the UI shows it instead of raising)."""
    fig = go.Figure()
    fig.update_layout(
        xaxis={"visible": False},
        yaxis={"visible": False},
        height=260,
        template="plotly_white",
        annotations=[
            {
                "text": message,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 16, "color": "#777"},
            }
        ],
    )
    return fig


def run_label(run: Any) -> str:
    """ "#12 aasd" for stored runs and summaries, the method alone for a bare RunTrace; a dict's
    explicit "label" wins, as does the label of a (label, trace) pair."""
    if is_pair(run):
        return str(run[0])
    if isinstance(run, Mapping):
        if run.get("label"):
            return str(run["label"])
        run_id = run.get("id", run.get("run_id"))
        trace = run.get("trace")
        method = run.get("method") or getattr(trace, "method", None)
        params = run.get("params") or getattr(trace, "params", None)
    else:
        run_id = getattr(run, "id", None)
        trace = run if isinstance(getattr(run, "method", None), str) else getattr(run, "trace", None)
        method, params = getattr(trace, "method", None), getattr(trace, "params", None)
    method = asked_as(method, params) if method else "run"  # as the run was asked for: aasd[auto]
    return f"#{run_id} {method}" if run_id is not None else str(method)


def is_pair(run: Any) -> bool:
    return isinstance(run, tuple) and len(run) == 2 and isinstance(run[0], str)


def num(value: float | int | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@functools.lru_cache(maxsize=1)
def _template() -> dict:
    return pio.templates["plotly_white"].to_plotly_json()


def fast_figure(data: list[dict], layout: dict) -> go.Figure:
    """A Figure from plain dicts without Plotly's property validation (~0.5 ms instead of ~15-30 ms):
    for the figures the replay redraws on every step switch; their dicts are written against Plotly's schema."""
    return go.Figure(data=data, layout={"template": _template(), **layout}, _validate=False)
