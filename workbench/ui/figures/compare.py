"""The Compare tab's figure: mean tokens/s per method over the repeats, with an interval (repeat_interval) as an
error bar.

The values are written under each bar (in the axis labels), never on the bar, so an error bar cannot cross
them; no interval reaches below 0 (a speed is never negative)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from workbench.ui.figures.common import TITLE_BELOW_TOOLBAR, empty_figure

INTERVAL_WORDS = "2 runs: their min–max; 3 or more: the 95 % t-interval, clipped at 0"


def repeat_interval(values: Sequence[float | None]) -> dict[str, Any]:
    """bench's spread (mean, sd, ci95, n) of repeated measurements of a speed, with the interval the app shows,
    lo–hi, never below 0: for two runs their min–max (Student's t with one degree of freedom widens ±sd by 12.7×, so
    its interval says nothing but "two runs", and reaches below 0 for any pair of speeds that differ by a sixth);
    for three or more the 95 % t-interval, clipped at 0; for one run none (lo = hi = None)."""
    from workbench.evaluation.bench import spread

    s = spread(values)
    xs = [v for v in values if v is not None]
    if len(xs) == 2:
        lo, hi = min(xs), max(xs)
    elif len(xs) > 2:
        lo, hi = max(s["mean"] - s["ci95"], 0.0), s["mean"] + s["ci95"]
    else:
        lo = hi = None
    return {**s, "lo": lo, "hi": hi}


def plus_minus(s: Mapping[str, Any], fmt: str) -> str:
    """ "12.3 (10.9–13.7)": the mean and its interval (repeat_interval); the mean alone for one run; "–" when it has
    no mean."""
    if s["mean"] is None:
        return "–"
    interval = f" ({fmt.format(s['lo'])}–{fmt.format(s['hi'])})" if s.get("lo") is not None else ""
    return fmt.format(s["mean"]) + interval


def error_bar(s: Mapping[str, Any]) -> tuple[float, float]:
    """(up, down) of an error bar from the mean to the interval's ends (repeat_interval), none for one run."""
    if s.get("lo") is None:
        return 0.0, 0.0
    return s["hi"] - s["mean"], s["mean"] - s["lo"]


def speed_figure(
    summary: Sequence[tuple[str, Mapping, Mapping, float | None]],
    colors: Mapping[str, str],
    other_text: Mapping[str, Any] | None = None,
    mark: str = "†",
) -> go.Figure:
    """Mean tokens/s per method of `summary` ((name, tok/s spread, speed-up spread, MAL), as
    compare_tab.speed_summary gives it), coloured by `colors`, with the interval (repeat_interval) as error bars
    when there were repeats. The speed-up of a method in `other_text` (it wrote other text than greedy) carries
    `mark`, as in the table, and its hover says so."""
    shown = [(n, t, s) for n, t, s, _ in summary if t["mean"] is not None]
    if not shown:
        return empty_figure("no finished runs")
    runs = max(t["n"] for _, t, _ in shown)
    bars = [error_bar(t) for _, t, _ in shown]
    marks = {n: f" {mark}" if n in (other_text or {}) else "" for n, _, _ in shown}
    ticks = [
        f"<b>{n}</b><br>{plus_minus(t, '{:.1f}')} tok/s<br>{plus_minus(s, '{:.2f}×')}{marks[n]}" for n, t, s in shown
    ]
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
            customdata=[
                [n, plus_minus(t, "{:.1f}"), plus_minus(s, "{:.2f}×"), t["n"]]
                + [" on other text than greedy's" if marks[n] else ""]
                for n, t, s in shown
            ],
            hovertemplate="%{customdata[0]}: %{customdata[1]} tok/s · speed-up %{customdata[2]}%{customdata[4]} "
            "(%{customdata[3]} runs)<extra></extra>",
        )
    )
    title = (
        f"tokens/s: mean of {runs} interleaved runs per method; error bars: "
        + ("min–max" if runs == 2 else "95 % t-interval, clipped at 0")
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
