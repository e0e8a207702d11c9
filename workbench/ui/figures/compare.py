"""The Compare tab's figure: mean tokens/s per method over the repeats, with the 95 % interval as an error bar.

The values are written under each bar (in the axis labels), never on the bar, so an error bar cannot cross
them; the lower half of an error bar stops at 0 tok/s (a speed is never negative, and an interval wider than
its mean only says the runs varied a lot)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from workbench.ui.figures.common import TITLE_BELOW_TOOLBAR, empty_figure


def plus_minus(s: Mapping[str, Any], fmt: str) -> str:
    """ "12.3 ± 1.4" from a spread (workbench.evaluation.bench.spread); "–" when it has no mean."""
    if s["mean"] is None:
        return "–"
    return fmt.format(s["mean"]) + (f" ± {fmt.format(s['ci95'])}" if s["ci95"] is not None else "")


def error_bar(mean: float, ci95: float | None) -> tuple[float, float]:
    """(up, down) of an error bar: the 95 % interval above the mean, and below it down to 0 at most."""
    ci = ci95 or 0.0
    return ci, min(ci, mean)


def speed_figure(summary: Sequence[tuple[str, Mapping, Mapping, float | None]], colors: Mapping[str, str]) -> go.Figure:
    """Mean tokens/s per method of `summary` ((name, tok/s spread, speed-up spread, MAL), as
    compare_tab.speed_summary gives it), coloured by `colors`, with the 95 % interval as error bars when there
    were repeats."""
    shown = [(n, t, s) for n, t, s, _ in summary if t["mean"] is not None]
    if not shown:
        return empty_figure("no finished runs")
    runs = max(t["n"] for _, t, _ in shown)
    bars = [error_bar(t["mean"], t["ci95"]) for _, t, _ in shown]
    ticks = [f"<b>{n}</b><br>{plus_minus(t, '{:.1f}')} tok/s<br>{plus_minus(s, '{:.2f}×')}" for n, t, s in shown]
    fig = go.Figure(
        go.Bar(
            x=ticks,
            y=[t["mean"] for _, t, _ in shown],
            marker_color=[colors[n] for n, _, _ in shown],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [up for up, _ in bars],
                "arrayminus": [down for _, down in bars],
                "visible": runs > 1,
                "thickness": 2,
                "color": "#333",
            },
            customdata=[[n, plus_minus(t, "{:.1f}"), plus_minus(s, "{:.2f}×"), t["n"]] for n, t, s in shown],
            hovertemplate="%{customdata[0]}: %{customdata[1]} tok/s · speed-up %{customdata[2]} (%{customdata[3]} runs)<extra></extra>",
        )
    )
    title = (
        f"tokens/s: mean of {runs} interleaved runs per method, error bars the 95 % interval"
        if runs > 1
        else "tokens/s (one run per method; set Repeats for error bars)"
    )
    top = max(t["mean"] + up for (_, t, _), (up, _) in zip(shown, bars))
    fig.update_layout(
        template="plotly_white",
        title={"text": title, "font": {"size": 14}, **TITLE_BELOW_TOOLBAR},
        height=330,
        showlegend=False,
        margin={"l": 50, "r": 20, "t": 70, "b": 70},
        yaxis={"title": "tokens / s", "range": [0, top * 1.15], "rangemode": "tozero"},
    )
    return fig
