"""The speed-quality frontier (`report --frontier`, the Frontier tab): speed-up against score change per relaxed
rule, one line per rule through its swept settings, with each point's 95 % interval of the score change."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from workbench.ui.figures.common import TITLE_BELOW_TOOLBAR, empty_figure

WORST = "worst family"  # the x axis read from the family whose interval reaches lowest, per point


FRONTIER_COMMAND = "python -m workbench report --frontier --limit 4 --out results/frontier"  # what fills the tab
# What it costs, from the runs in docs/RESULTS.md: 14 settings and greedy on every item of every family
FRONTIER_COST = (
    "300 decodes: over 1.5 hours of one CPU core for SmolLM2; --families summarization,rag,writing --limit 2 "
    "took 39 min"
)
FRONTIER_INTRO = (
    "How much speed each relaxed verification rule buys and what it costs in quality: per threshold setting, the "
    "speed-up over greedy against the score change on held-out task items (95 % interval). Made by "
    f"`{FRONTIER_COMMAND}` ({FRONTIER_COST}); give its --out folder here and Draw."
)


def point_change(point: Mapping[str, Any], family: str = WORST) -> dict[str, float] | None:
    """A point's score change on `family` (mean, low, high in points), or on the family whose lower bound is
    lowest (WORST: what the admissibility rule looks at); None when the family was not measured."""
    intervals = point.get("families") or {}
    if family != WORST:
        return intervals.get(family)
    return min(intervals.values(), key=lambda i: i["low"], default=None)


def frontier_figure(result: Mapping[str, Any] | None, family: str = WORST, tolerance: float = 1.0) -> go.Figure:
    """x: score change against greedy (points, ×100 scores) on `family` or the worst family, with its 95 % interval
    as an error bar; y: measured speed-up against greedy in the same run. Greedy is the point (0, 1); the dotted
    line at −`tolerance` is the admissibility bound."""
    points = [p for p in (result or {}).get("points") or [] if p.get("speedup") is not None]
    if not points:
        return empty_figure(f"no frontier here: run {FRONTIER_COMMAND}")
    palette = pio.templates["plotly_white"].layout.colorway or ["#1f77b4"]
    fig = go.Figure()
    rules = list(dict.fromkeys(p["rule"] for p in points))
    for k, rule in enumerate(rules):
        xs, ys, lo, hi, text = [], [], [], [], []
        for p in (p for p in points if p["rule"] == rule):
            c = point_change(p, family)
            if c is None:
                continue
            xs.append(c["mean"])
            ys.append(p["speedup"])
            lo.append(c["mean"] - c["low"])
            hi.append(c["high"] - c["mean"])
            per = "<br>".join(
                f"{html.escape(f)}: {i['mean']:+.1f} [{i['low']:+.1f}, {i['high']:+.1f}]"
                for f, i in (p.get("families") or {}).items()
            )
            verdict = "admissible" if p.get("admissible") else "not admissible: " + ", ".join(p.get("failing") or ())
            text.append(
                f"{html.escape(p['spec'])}<br>{p['speedup']:.2f}x greedy, MAL {p.get('mal') or 0:.2f}<br>{per}<br>{verdict}"
            )
        if not xs:
            continue
        order = sorted(range(len(xs)), key=lambda i: ys[i])
        fig.add_trace(
            go.Scatter(
                x=[xs[i] for i in order],
                y=[ys[i] for i in order],
                mode="lines+markers",
                name=rule,
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [hi[i] for i in order],
                    "arrayminus": [lo[i] for i in order],
                    "thickness": 1,
                },
                marker={"color": palette[k % len(palette)], "size": 9},
                line={"color": palette[k % len(palette)]},
                text=[text[i] for i in order],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[0],
            y=[1],
            mode="markers",
            name="greedy",
            marker={"color": "#000000", "symbol": "x", "size": 10},
            hovertemplate="greedy<extra></extra>",
        )
    )
    fig.add_vline(x=-tolerance, line_dash="dot", line_color="#888888")
    axis = "worst family's" if family == WORST else f"{family}'s"
    fig.update_layout(
        template="plotly_white",
        height=480,
        margin={"t": 80},
        title={
            "text": f"Speed-up vs {axis} score change (95 % intervals); dotted: the −{tolerance:g} point bound",
            **TITLE_BELOW_TOOLBAR,
        },
        xaxis_title="score change against greedy (points)",
        yaxis_title="speed-up against greedy (same run)",
    )
    return fig


def frontier_view(path: str, family: str = WORST) -> tuple[go.Figure, str]:
    """The Frontier tab: `report --frontier`'s frontier.json (or the folder holding it, below the working folder)
    drawn, and its table; a missing or unreadable file is no figure and a message, never an exception."""
    import json
    from pathlib import Path

    from workbench.evaluation.frontier import format_frontier

    here = Path.cwd().resolve()
    file = (here / (path.strip() or ".")).resolve()
    if not file.is_relative_to(here):  # a server reads only below the folder it was started in
        return None, f"give a folder below the server's working folder, not {path.strip()!r}"
    file = file / "frontier.json" if file.is_dir() else file
    try:
        result = json.loads(file.read_text(encoding="utf-8"))
        result["points"], result["families"], result["greedy"]  # noqa: B018 - the keys the view reads
    except (OSError, ValueError, KeyError, TypeError):
        # said once, in the Markdown below the plot (a Plotly annotation shows backticks as they are)
        return None, f"no frontier at {file}: run `{FRONTIER_COMMAND}` ({FRONTIER_COST}) and give its --out folder here"
    return frontier_figure(result, family), format_frontier(result)
