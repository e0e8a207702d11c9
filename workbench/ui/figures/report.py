"""The report's figures (`python -m workbench report`): CASD's threshold curves over δ."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from workbench.ui.figures.common import empty_figure


def delta_sweep_figure(sweep: Mapping[str, Any], metric: str = "score") -> go.Figure:
    """CASD's threshold curves (Figure 2: score, Figure 4: MAL): a line per dataset over δ, falling to the
    right on a log axis, with greedy decoding's value as a dotted line of the same colour.
    `sweep` is workbench.evaluation.report.delta_sweep's plain data."""
    deltas = list(sweep.get("deltas") or [])
    if not deltas or not sweep.get("datasets"):
        return empty_figure("no δ sweep in these results (run --tables casd)")
    name = "score" if metric == "score" else "MAL (tokens per step)"
    palette = pio.templates["plotly_white"].layout.colorway or ["#1f77b4"]
    fig = go.Figure()
    for i, (dataset, data) in enumerate(sweep["datasets"].items()):
        color = palette[i % len(palette)]
        ys = data.get(metric) or []
        if all(y is None for y in ys):
            continue
        fig.add_trace(
            go.Scatter(
                x=deltas,
                y=ys,
                mode="lines+markers",
                name=dataset,
                line={"color": color},
                hovertemplate=f"{html.escape(dataset)}<br>δ %{{x:g}}: %{{y:.2f}}<extra></extra>",
            )
        )
        base = data.get(f"greedy_{metric}")
        if base is not None:
            fig.add_trace(
                go.Scatter(
                    x=[deltas[0], deltas[-1]],
                    y=[base, base],
                    mode="lines",
                    name=f"{dataset} greedy",
                    line={"color": color, "dash": "dot"},
                    showlegend=False,
                    hovertemplate=f"{html.escape(dataset)} greedy: %{{y:.2f}}<extra></extra>",
                )
            )
    fig.update_layout(
        template="plotly_white",
        title=f"CASD: {name} against the threshold δ (dotted: greedy)",
        height=420,
        margin={"t": 60},
        yaxis={"title": name},
        xaxis={
            "title": "δ",
            "type": "log",
            "autorange": "reversed",
            "tickvals": deltas,
            "ticktext": [f"{d:g}" for d in deltas],
        },
    )
    return fig
