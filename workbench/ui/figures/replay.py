"""The Replay & tune tab's figures, server side: one step's draft tree and its p against thresholds (the API's
/replay_step; the browser draws the same from workbench/ui/replay_js.py), and a run's acceptance per draft position."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

import plotly.graph_objects as go

from core.stats import POSITION_ACCEPTANCE, position_acceptance
from core.token_text import visible_token
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.ui.figures.common import (
    DECISION_COLORS,
    NO_RUNS,
    SOURCE_SYMBOLS,
    TITLE_BELOW_TOOLBAR,
    empty_figure,
    fast_figure,
    num,
    run_label,
)
from workbench.ui.reasons import readable_reason
from workbench.ui.tokens import emitted_nodes, show_token


def _decision_key(node: NodeTrace) -> str:
    return "root" if node.parent == -1 else node.decision


def node_hover(node: NodeTrace, text_of: Callable[[int], str] | None = None) -> str:
    """Everything a verification rule looked at for this node, as Plotly hover text (the reason in words:
    workbench.ui.replay_view.readable_reason, with `text_of` naming the correction token)."""
    lines = [
        f"<b>#{node.node} {html.escape(repr(visible_token(node.token_text)))}</b>  id {node.token_id}",
        f"source {node.source} · depth {node.depth} · parent {node.parent}",
        f"<b>{_decision_key(node)}</b>: {html.escape(readable_reason(node.reason, text_of))}",
        f"p {num(node.p)} · threshold {num(node.threshold)}",
        f"entropy {num(node.entropy)} · max p {num(node.max_p)} · p_eos {num(node.p_eos)}",
        f"rank {num(node.rank)} · logit gap {num(node.logit_gap)}",
        f"draft p {num(node.draft_p)} · mem count {num(node.mem_count)}",
    ]
    if node.correction_id is not None:
        lines.append(f"correction t* {node.correction_id}")
    return "<br>".join(lines)


def tree_layout(nodes: Sequence[NodeTrace]) -> dict[int, tuple[float, float]]:
    """(x, y) per node index: x = depth, leaves spread one unit apart in tree order, parents at the
    mean of their children. The bonus record hangs under its parent like any node."""
    index = {n.node: n for n in nodes}
    kids: dict[int, list[int]] = {n.node: [] for n in nodes}
    roots = []
    for n in sorted(nodes, key=lambda n: n.node):
        if n.parent in kids and n.parent != n.node:
            kids[n.parent].append(n.node)
        else:
            roots.append(n.node)
    preorder, stack = [], list(reversed(roots))
    while stack:  # iterative: trees are small, but recursion limits should never matter here
        i = stack.pop()
        preorder.append(i)
        stack.extend(reversed(kids[i]))
    y: dict[int, float] = {}
    leaf = 0
    for i in preorder:
        if not kids[i]:
            y[i] = float(leaf)
            leaf += 1
    for i in reversed(preorder):
        if kids[i]:
            y[i] = sum(y[c] for c in kids[i]) / len(kids[i])
    return {i: (float(index[i].depth), -y[i]) for i in preorder}  # negative: first leaf on top


def tree_height(leaves: int) -> int:
    """The draft tree figure's height (px) for a tree with `leaves` leaves, legend rows included; the browser's
    drawing (replay_js) uses the same sizes, so its boxes are made this tall and nothing is cut."""
    return max(320, 26 * leaves + 120) + LEGEND_ROOM


def threshold_height(gate: bool) -> int:
    """The threshold figure's height (px), with the CSD gate panel or without, legend rows included."""
    return 340 + (220 if gate else 0) + LEGEND_ROOM


LEGEND_ROOM = 40  # px for legend rows that wrap


def tree_figure(step: StepTrace, text_of: Callable[[int], str] | None = None) -> go.Figure:
    """The step's draft tree: x = depth, markers coloured by decision, shaped by source.

    A handful of traces (edges, accepted-path edges, one per decision, legend keys for sources) and
    none per node, so switching steps in the replay stays fast for trees of ~64 nodes.
    """
    if not step.nodes:
        return empty_figure("no node records for this step")
    pos = tree_layout(step.nodes)
    index = {n.node: n for n in step.nodes}
    on_path = {n.node for n in emitted_nodes(step)} | {n.node for n in step.nodes if n.parent == -1}

    edges: dict[bool, tuple[list, list]] = {False: ([], []), True: ([], [])}
    for n in step.nodes:
        if n.parent in index and n.node in pos and n.parent in pos:
            xs, ys = edges[n.node in on_path and n.parent in on_path]
            (x0, y0), (x1, y1) = pos[n.parent], pos[n.node]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
    traces = [
        {
            "type": "scatter",
            "x": edges[False][0],
            "y": edges[False][1],
            "mode": "lines",
            "line": {"color": "#c8c8c8", "width": 1},
            "hoverinfo": "skip",
            "showlegend": False,
        },
        {
            "type": "scatter",
            "x": edges[True][0],
            "y": edges[True][1],
            "mode": "lines",
            "line": {"color": DECISION_COLORS["accepted"], "width": 3},
            "hoverinfo": "skip",
            "name": "emitted path",
        },
    ]
    by_decision: dict[str, list[NodeTrace]] = {}
    for n in step.nodes:
        if n.node in pos:  # a node cut off from the root (corrupt records) has no place to be drawn
            by_decision.setdefault(_decision_key(n), []).append(n)
    for decision, color in DECISION_COLORS.items():
        group = by_decision.get(decision)
        if not group:
            continue
        traces.append(
            {
                "type": "scatter",
                "x": [pos[n.node][0] for n in group],
                "y": [pos[n.node][1] for n in group],
                "mode": "markers+text",
                "name": decision,
                "marker": {
                    "color": color,
                    "size": 13,
                    "line": {"color": "#ffffff", "width": 1},
                    "symbol": [SOURCE_SYMBOLS.get(n.source, "circle") for n in group],
                },
                "text": [show_token(n.token_text) for n in group],
                "textposition": "middle right",
                "textfont": {"size": 11},
                "hovertext": [node_hover(n, text_of) for n in group],
                "hoverinfo": "text",
                "customdata": [n.node for n in group],
            }
        )
    # Legend keys for the marker shapes: empty traces, cheap, only for sources present.
    for source in dict.fromkeys(n.source for n in step.nodes):
        traces.append(
            {
                "type": "scatter",
                "x": [None],
                "y": [None],
                "mode": "markers",
                "name": f"source: {source}",
                "marker": {"symbol": SOURCE_SYMBOLS.get(source, "circle"), "color": "#666", "size": 10},
                "legendgroup": "sources",
            }
        )

    leaves = len({y for _, y in pos.values()})
    return fast_figure(
        traces,
        {
            "title": {"text": tree_title(step), "font": {"size": 14}, **TITLE_BELOW_TOOLBAR},
            "height": tree_height(leaves),
            "margin": {"l": 20, "r": 20, "t": 70, "b": 40},
            "xaxis": {"title": {"text": "depth"}, "dtick": 1, "zeroline": False},
            "yaxis": {"visible": False},
            "hovermode": "closest",
        },
    )


def tree_title(step: StepTrace) -> str:
    """The draft tree's title: "step 3: 2 of 7 drafted accepted, 3 emitted"; where CSD rescued some of the kept ones
    (verification rejected them), "2 of 2 drafted kept (1 rescued)": "accepted" alone read as if verification had
    passed both."""
    rescued = sum(1 for n in step.nodes if n.decision == "rescued")
    kept = f"kept ({rescued} rescued)" if rescued else "accepted"
    return f"step {step.index}: {step.accepted} of {step.tree_size} drafted {kept}, {len(step.emitted)} emitted"


def is_gate_node(node: NodeTrace) -> bool:
    """A node judged by CSD's walk: its `threshold` is τ of the gate, not a probability threshold."""
    return node.correction_id is not None or node.mem_count is not None or node.source == "draft"


def threshold_figure(
    step: StepTrace, tau: float | None = None, gate: bool = True, text_of: Callable[[int], str] | None = None
) -> go.Figure:
    """Per draft node (root and bonus left out): p against the threshold its rule used, coloured by
    decision, with the parent's entropy on a second axis. A method with CSD's gate (`gate`; not AASD, whose
    rejections record a correction too) gets a second panel for the nodes the gate judged: logit gap
    against −ln τ (the gate passes when gap ≤ −ln τ, exactly so when the correction is the argmax).
    τ comes from the node when the walk recorded it, else from `tau` (the run's parameter)."""
    nodes = [n for n in step.nodes if n.parent != -1 and n.decision != "bonus"]
    if not nodes:
        return empty_figure("this step drafted no tokens")
    cats = [f"{n.node}:{show_token(n.token_text, 10)}" for n in nodes]
    gates = [gate and is_gate_node(n) for n in nodes]
    rows = 2 if any(gates) else 1
    hover = [node_hover(n, text_of) for n in nodes]
    data: list[dict] = []
    for decision in ("accepted", "rescued", "rejected", "unreached"):
        idx = [i for i, n in enumerate(nodes) if n.decision == decision]
        if idx:
            data.append(
                {
                    "type": "bar",
                    "x": [cats[i] for i in idx],
                    "y": [nodes[i].p for i in idx],
                    "name": decision,
                    "marker": {"color": DECISION_COLORS[decision]},
                    "hovertext": [hover[i] for i in idx],
                    "hoverinfo": "text",
                    "legendgroup": decision,
                    "xaxis": "x",
                    "yaxis": "y",
                }
            )
    prob = [i for i, n in enumerate(nodes) if not gates[i] and n.threshold is not None]
    if prob:
        data.append(
            {
                "type": "scatter",
                "x": [cats[i] for i in prob],
                "y": [nodes[i].threshold for i in prob],
                "mode": "markers",
                "name": "threshold",
                "marker": {
                    "symbol": "line-ew",
                    "size": 26,
                    "color": "#000000",
                    "line": {"width": 3, "color": "#000000"},
                },
                "hovertext": [hover[i] for i in prob],
                "hoverinfo": "text",
                "xaxis": "x",
                "yaxis": "y",
            }
        )
    data.append(
        {
            "type": "scatter",
            "x": cats,
            "y": [n.entropy for n in nodes],
            "mode": "lines+markers",
            "name": "entropy (nats)",
            "line": {"color": "#7f7f7f", "dash": "dot"},
            "marker": {"size": 5},
            "hoverinfo": "skip",
            "xaxis": "x",
            "yaxis": "y2",
        }
    )
    # Subplots laid out by hand (make_subplots validates every property: ~30 ms per step switch).
    top = [0.45, 1.0] if rows == 2 else [0.0, 1.0]
    xaxis = {"categoryorder": "array", "categoryarray": cats, "tickangle": -45, "anchor": "y"}
    layout = {
        "xaxis": {**xaxis, "showticklabels": rows == 1},
        "yaxis": {"title": {"text": "p"}, "range": [0, 1.05], "domain": top},
        "yaxis2": {"title": {"text": "entropy (nats)"}, "overlaying": "y", "side": "right", "showgrid": False},
        "annotations": [_subplot_title("p vs threshold", top[1])],
    }
    if rows == 2:
        gated = [i for i, g in enumerate(gates) if g]
        data.append(
            {
                "type": "bar",
                "x": [cats[i] for i in gated],
                "y": [nodes[i].logit_gap for i in gated],
                "name": "logit gap",
                "marker": {"color": [DECISION_COLORS.get(nodes[i].decision, "#999") for i in gated]},
                "hovertext": [hover[i] for i in gated],
                "hoverinfo": "text",
                "showlegend": False,
                "xaxis": "x2",
                "yaxis": "y3",
            }
        )
        limits = [(i, nodes[i].threshold if nodes[i].threshold is not None else tau) for i in gated]
        limits = [(i, t) for i, t in limits if t is not None and 0 < t <= 1]
        if limits:
            data.append(
                {
                    "type": "scatter",
                    "x": [cats[i] for i, _ in limits],
                    "y": [-math.log(t) for _, t in limits],
                    "mode": "markers",
                    "name": "−ln τ",
                    "marker": {
                        "symbol": "line-ew",
                        "size": 26,
                        "color": "#000000",
                        "line": {"width": 3, "color": "#ff7f0e"},
                    },
                    "hovertext": [f"τ {t:.4g}, −ln τ {-math.log(t):.4g}" for _, t in limits],
                    "hoverinfo": "text",
                    "xaxis": "x2",
                    "yaxis": "y3",
                }
            )
        layout["xaxis2"] = {**xaxis, "anchor": "y3", "matches": "x"}
        layout["yaxis3"] = {"title": {"text": "logit gap"}, "domain": [0.0, 0.31], "anchor": "x2"}
        layout["annotations"].append(_subplot_title("CSD gate: logit gap z(t*) − z(x) vs −ln τ", 0.31))
    layout.update(
        {
            "barmode": "overlay",
            "height": threshold_height(rows == 2),
            "title": {"text": f"step {step.index}: thresholds", "font": {"size": 14}, **TITLE_BELOW_TOOLBAR},
            "margin": {"l": 50, "r": 50, "t": 80, "b": 90},
            "hovermode": "closest",
        }
    )
    return fast_figure(data, layout)


def _subplot_title(text: str, top: float) -> dict:
    return {
        "text": text,
        "x": 0.5,
        "xref": "paper",
        "xanchor": "center",
        "y": top,
        "yref": "paper",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": 13},
    }


def position_figure(run: RunTrace, label: str | None = None) -> go.Figure:
    """Acceptance per draft position (core.stats.position_acceptance): at position d, the share of the
    steps offering a judged node at depth d that accepted at least d tokens; bars labelled "accepted/offered"."""
    table = position_acceptance(run) if run is not None else {}
    if not table:
        return empty_figure("no judged draft nodes in this run" if run is not None else NO_RUNS)
    depths = list(table)
    rates = [table[d][0] / table[d][1] if table[d][1] else 0.0 for d in depths]
    name = label or run_label(run)
    data = [
        {
            "type": "bar",
            "x": depths,
            "y": rates,
            "name": name,
            "marker": {"color": DECISION_COLORS["accepted"]},
            "text": [f"{table[d][0]}/{table[d][1]}" for d in depths],
            "textposition": "outside",
            "customdata": [list(table[d]) for d in depths],
            "hovertemplate": (
                f"{html.escape(name)}<br>position %{{x}}: %{{y:.1%}} "
                "(%{customdata[0]} of %{customdata[1]} steps)<extra></extra>"
            ),
        }
    ]
    return fast_figure(
        data,
        {
            "title": {
                # the meaning: the tab's help line (a second title line would run under Plotly's toolbar)
                "text": f"{html.escape(name)}: {POSITION_ACCEPTANCE} per draft position",
                "font": {"size": 14},
                **TITLE_BELOW_TOOLBAR,
            },
            "height": 360,
            "margin": {"l": 50, "r": 20, "t": 75, "b": 50},
            "showlegend": False,
            "xaxis": {"title": {"text": "draft position d (1 = first token after the root)"}, "dtick": 1},
            "yaxis": {"title": {"text": "accepted / offered"}, "range": [0, 1.12], "tickformat": ".0%"},
        },
    )
