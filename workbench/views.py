"""Pure rendering of traces: token highlighting as HTML and Plotly figures.

No Gradio, no model, no SQL: every function takes trace records (core/trace.py) or plain dicts and
returns a string or a `plotly.graph_objects.Figure`, so the UI, the replay and the tests share them.
"""
from __future__ import annotations

import functools
import html
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from core.stats import acceptance_by, position_acceptance, run_metrics
from core.trace import NodeTrace, RunTrace, StepTrace

# ---------------------------------------------------------------- colours and names

# Background colours of emitted tokens by where they came from (light, so dark text stays readable).
ORIGIN_COLORS: dict[str, str] = {
    "context": "#cfe3ff",
    "alignment": "#e4d7ff",
    "draft": "#c9f0e1",
    "generated": "#fff0b3",
    "recycled": "#d9f2c2",
    "rescued": "#ffd2a8",
    "model": "#ececec",
}
ORIGIN_DESCRIPTIONS: dict[str, str] = {
    "context": "copied from the prompt / context and accepted",
    "alignment": "an alignment-sampling sibling, accepted",
    "draft": "draft-model token, accepted",
    "generated": "from the pool's generated tokens, accepted",
    "recycled": "from Token Recycling's table (the target's own past top-k), accepted",
    "rescued": "rejected by the target, rescued by CSD",
    "model": "the target model's own token (bonus or plain decoding)",
}
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
DIVERGENCE_COLOR = "#d62728"
NO_RUNS = "no runs selected"


def empty_figure(message: str = NO_RUNS) -> go.Figure:
    """A blank figure that says why it is blank (the UI shows it instead of raising)."""
    fig = go.Figure()
    fig.update_layout(
        xaxis={"visible": False}, yaxis={"visible": False}, height=260, template="plotly_white",
        annotations=[{"text": message, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                      "showarrow": False, "font": {"size": 16, "color": "#777"}}],
    )
    return fig


# ---------------------------------------------------------------- labels

def run_label(run: Any) -> str:
    """"#12 aasd" for stored runs and summaries, the method alone for a bare RunTrace; a dict's
    explicit "label" wins, as does the label of a (label, trace) pair."""
    if _is_pair(run):
        return str(run[0])
    if isinstance(run, Mapping):
        if run.get("label"):
            return str(run["label"])
        run_id = run.get("id", run.get("run_id"))
        trace = run.get("trace")
        method = run.get("method") or getattr(trace, "method", None)
    else:
        run_id = getattr(run, "id", None)
        method = getattr(run, "method", None) or getattr(getattr(run, "trace", None), "method", None)
    method = method or "run"
    return f"#{run_id} {method}" if run_id is not None else str(method)


def _is_pair(run: Any) -> bool:
    return isinstance(run, tuple) and len(run) == 2 and isinstance(run[0], str)


def _show(text: str, limit: int = 14) -> str:
    """A token as a short visible label: spaces and newlines made visible, HTML-escaped for Plotly."""
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown or "∅")


def _num(value: float | int | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------- token origins and HTML

def _origin(node: NodeTrace) -> str:
    if node.decision == "bonus":
        return "model"
    if node.decision == "rescued":
        return "rescued"
    return node.source


def emitted_nodes(step: StepTrace) -> list[NodeTrace]:
    """The records of the tokens the step emitted, before any stop cut: the accepted path in depth
    order (root excluded), then the bonus. Empty when the step has no node records."""
    bonus = next((n for n in step.nodes if n.decision == "bonus"), None)
    if bonus is None:
        return []
    # Walk up from the bonus's parent rather than collecting "accepted" nodes, so the path is the one
    # the verifier chose whatever else a rule marked.
    by_index = {n.node: n for n in step.nodes}
    path, node = [bonus], by_index.get(bonus.parent)
    while node is not None and node.parent != -1 and len(path) <= len(by_index):
        path.append(node)
        node = by_index.get(node.parent)
    return path[::-1]


def _step_origins(step: StepTrace, decode: Callable[[int], str] | None) -> list[tuple[str, str]]:
    """(text, origin) of the step's accepted path then its bonus token, before the stop cut."""
    path = emitted_nodes(step)
    if not path:  # stored without node records: the origin is unknown, the text may be too
        return [(decode(t) if decode else f"⟨{t}⟩", "model") for t in step.emitted]
    return [(n.token_text, _origin(n)) for n in path]


def _decoder(decode: Any) -> Callable[[int], str] | None:
    """A token id -> text function from a callable or a tokenizer."""
    if decode is None or not hasattr(decode, "decode"):
        return decode
    return lambda t: decode.decode([t])


def step_origins(steps: Iterable[StepTrace], decode: Any = None) -> list[tuple[str, str]]:
    """(token_text, origin) for the tokens a sequence of steps emitted (e.g. a run still streaming).
    `decode` (a tokenizer or id -> text) is only needed for steps without node records."""
    decode = _decoder(decode)
    out: list[tuple[str, str]] = []
    for step in steps:
        out.extend(_step_origins(step, decode)[: len(step.emitted)])  # emitted may be cut at a stop
    return out


def token_origins(run: RunTrace, decode: Any = None) -> list[tuple[str, str]]:
    """(token_text, origin) for every emitted token in order, from the step records.

    Runs without steps (transformers' generate baselines) are all "model"; their per-token text
    needs `decode` (a tokenizer or id -> text), else the whole output comes back as one span.
    """
    if run.steps:
        return step_origins(run.steps, decode)
    decode = _decoder(decode)
    if decode is not None:
        return [(decode(t), "model") for t in run.output_ids]
    return [(run.output_text, "model")] if run.output_text else []


def _span(text: str, origin: str, marked: bool, marker_title: str, marker_class: str | None = None) -> str:
    style = f"background:{ORIGIN_COLORS.get(origin, '#ffffff')};color:#111;border-radius:2px"
    title, classes = origin, f"tok tok-{html.escape(origin)}"
    if marked:
        style += f";border-left:3px solid {DIVERGENCE_COLOR}"
        title = f"{marker_title} ({origin})"
        if marker_class:
            classes += f" {html.escape(marker_class)}"
            style += f";outline:2px dashed {DIVERGENCE_COLOR}"
    return (f'<span class="{classes}" style="{style}" '
            f'title="{html.escape(title)}">{html.escape(text)}</span>')


def tokens_html(
    origins: Sequence[tuple[str, str]],
    first_divergence: int | None = None,
    upto: int | None = None,
    marker_title: str = "first divergence from greedy",
    marker_class: str | None = None,
) -> str:
    """Tokens as spans coloured by origin, whitespace kept; a red left border marks the token at
    `first_divergence` (with the CSS class `marker_class` too, when given: the compare tab's lossless
    flips); `upto` shows only the first `upto` tokens (replay)."""
    shown = origins[:upto] if upto is not None else origins
    parts = [_span(text, origin, i == first_divergence, marker_title, marker_class) for i, (text, origin) in enumerate(shown)]
    # The shorter of two runs diverges at its own end: mark the end so the reader still sees it.
    if first_divergence is not None and first_divergence == len(origins) and len(shown) == len(origins):
        extra = f" {html.escape(marker_class)}" if marker_class else ""
        parts.append(f'<span class="tok-divergence{extra}" style="border-left:3px solid {DIVERGENCE_COLOR}" '
                     f'title="{html.escape(marker_title)} (output ends here)">&#8203;</span>')
    return ('<div class="tokens" style="white-space:pre-wrap;font-family:ui-monospace,monospace;'
            f'line-height:1.6">{"".join(parts)}</div>')


def flip_title(position: int, report: Mapping[str, Any] | None = None) -> str:
    """The hover text of a lossless method's first token that is not greedy's: the position, and, when
    workbench.evaluation.fidelity.flip_report measured it, the target's logit gap there and whether
    that is a near-tie (a lossless method may flip only where rounding can)."""
    text = f"a lossless method left greedy's tokens at position {position}"
    if report:
        tie = "a near-tie" if report.get("near_tie") else "not a near-tie"
        text += f": logit gap {report['gap']:.3g} ({report.get('dtype', '?')}), {tie}"
    return text


def token_diff_html(a: Sequence[str], b: Sequence[str], first: int | None, labels: tuple[str, str] = ("A", "B"),
                    ids: tuple[Sequence[int], Sequence[int]] | None = None) -> str:
    """Two outputs aligned position by position: one cell per position with run A's token above run B's;
    cells whose tokens differ (by id when `ids` are given, else by text) are red (class `differ`), the first
    divergence is outlined (class `first`) and each cell's title names its position. A run that ends first
    shows ∅ in the positions it lacks."""
    la, lb = (html.escape(x) for x in labels)
    key_a, key_b = ids if ids is not None else (a, b)
    cells = []
    for i in range(max(len(a), len(b))):
        ta, tb = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        same = i < len(key_a) and i < len(key_b) and key_a[i] == key_b[i]
        cls = "pair same" if same else "pair differ"
        if i == first:
            cls += " first"
        title = f"position {i}" + ("" if same else f": {la} {ta!r} · {lb} {tb!r}" if ta is not None and tb is not None
                                   else f": only {la if tb is None else lb} has a token")
        if i == first:
            title += " (first divergence)"
        bg = "#ffffff" if same else "#ffd6d6"
        border = f"2px solid {DIVERGENCE_COLOR}" if i == first else "1px solid #e3e3e3"

        def cell(t: str | None, who: str) -> str:
            return f'<span class="side {who}" style="display:block">{"∅" if t is None else _show(t, 24)}</span>'

        cells.append(f'<span class="{cls}" title="{html.escape(title)}" style="display:inline-block;vertical-align:top;'
                     f'margin:1px;padding:0 2px;background:{bg};border:{border};border-radius:3px">'
                     f'{cell(ta, "a")}{cell(tb, "b")}</span>')
    head = (f'<div class="tokdiff-key" style="font-size:0.85em;color:#555;margin-bottom:4px">each cell: top {la}, '
            f'bottom {lb}; red: the tokens differ; outlined: the first divergence; ␣ a space, ↵ a newline</div>')
    return ('<div class="tokdiff" style="font-family:ui-monospace,monospace;font-size:0.9em;line-height:1.4">'
            + head + "".join(cells) + "</div>")


def legend_html() -> str:
    """A one-line key to the origin colours."""
    items = [f'<span style="background:{color};color:#111;padding:0 6px;border-radius:2px;margin-right:8px" '
             f'title="{html.escape(ORIGIN_DESCRIPTIONS[origin])}">{origin}</span>'
             for origin, color in ORIGIN_COLORS.items()]
    items.append(f'<span style="border-left:3px solid {DIVERGENCE_COLOR};padding-left:4px;margin-right:8px">first divergence</span>')
    items.append(f'<span style="border-left:3px solid {DIVERGENCE_COLOR};outline:2px dashed {DIVERGENCE_COLOR};padding-left:4px" '
                 f'title="a lossless method should emit greedy\'s tokens; hover the marked token for the position and the '
                 f'target\'s logit gap there">lossless method left greedy</span>')
    return f'<div class="token-legend" style="font-size:0.9em">{"".join(items)}</div>'


# ---------------------------------------------------------------- one step: the draft tree

def _decision_key(node: NodeTrace) -> str:
    return "root" if node.parent == -1 else node.decision


def node_hover(node: NodeTrace) -> str:
    """Everything a verification rule looked at for this node, as Plotly hover text."""
    lines = [
        f"<b>#{node.node} {html.escape(repr(node.token_text))}</b>  id {node.token_id}",
        f"source {node.source} · depth {node.depth} · parent {node.parent}",
        f"<b>{_decision_key(node)}</b>: {html.escape(node.reason)}",
        f"p {_num(node.p)} · threshold {_num(node.threshold)}",
        f"entropy {_num(node.entropy)} · max p {_num(node.max_p)} · p_eos {_num(node.p_eos)}",
        f"rank {_num(node.rank)} · logit gap {_num(node.logit_gap)}",
        f"draft p {_num(node.draft_p)} · mem count {_num(node.mem_count)}",
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


def tree_figure(step: StepTrace) -> go.Figure:
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
        {"type": "scatter", "x": edges[False][0], "y": edges[False][1], "mode": "lines",
         "line": {"color": "#c8c8c8", "width": 1}, "hoverinfo": "skip", "showlegend": False},
        {"type": "scatter", "x": edges[True][0], "y": edges[True][1], "mode": "lines",
         "line": {"color": DECISION_COLORS["accepted"], "width": 3}, "hoverinfo": "skip", "name": "emitted path"},
    ]
    by_decision: dict[str, list[NodeTrace]] = {}
    for n in step.nodes:
        if n.node in pos:  # a node cut off from the root (corrupt records) has no place to be drawn
            by_decision.setdefault(_decision_key(n), []).append(n)
    for decision, color in DECISION_COLORS.items():
        group = by_decision.get(decision)
        if not group:
            continue
        traces.append({
            "type": "scatter", "x": [pos[n.node][0] for n in group], "y": [pos[n.node][1] for n in group],
            "mode": "markers+text", "name": decision,
            "marker": {"color": color, "size": 13, "line": {"color": "#ffffff", "width": 1},
                       "symbol": [SOURCE_SYMBOLS.get(n.source, "circle") for n in group]},
            "text": [_show(n.token_text) for n in group], "textposition": "middle right", "textfont": {"size": 11},
            "hovertext": [node_hover(n) for n in group], "hoverinfo": "text", "customdata": [n.node for n in group],
        })
    # Legend keys for the marker shapes: empty traces, cheap, only for sources present.
    for source in dict.fromkeys(n.source for n in step.nodes):
        traces.append({"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": f"source: {source}",
                       "marker": {"symbol": SOURCE_SYMBOLS.get(source, "circle"), "color": "#666", "size": 10},
                       "legendgroup": "sources"})

    leaves = len({y for _, y in pos.values()})
    return fast_figure(traces, {
        "title": {"text": tree_title(step), "font": {"size": 14}},
        "height": max(320, 26 * leaves + 120), "margin": {"l": 20, "r": 20, "t": 50, "b": 30},
        "xaxis": {"title": {"text": "depth"}, "dtick": 1, "zeroline": False},
        "yaxis": {"visible": False}, "hovermode": "closest",
    })


def tree_title(step: StepTrace) -> str:
    """The draft tree's title: "step 3: 2 of 7 drafted accepted, 3 emitted"."""
    return f"step {step.index}: {step.accepted} of {step.tree_size} drafted accepted, {len(step.emitted)} emitted"


# ---------------------------------------------------------------- one step: thresholds

def is_gate_node(node: NodeTrace) -> bool:
    """A node judged by CSD's walk: its `threshold` is τ of the gate, not a probability threshold."""
    return node.correction_id is not None or node.mem_count is not None or node.source == "draft"


def threshold_figure(step: StepTrace, tau: float | None = None) -> go.Figure:
    """Per draft node (root and bonus left out): p against the threshold its rule used, coloured by
    decision, with the parent's entropy on a second axis. CSD nodes get a second panel: logit gap
    against −ln τ (the gate passes when gap ≤ −ln τ, exactly so when the correction is the argmax).
    τ comes from the node when the walk recorded it, else from `tau` (the run's parameter)."""
    nodes = [n for n in step.nodes if n.parent != -1 and n.decision != "bonus"]
    if not nodes:
        return empty_figure("this step drafted no tokens")
    cats = [f"{n.node}:{_show(n.token_text, 10)}" for n in nodes]
    gates = [is_gate_node(n) for n in nodes]
    rows = 2 if any(gates) else 1
    hover = [node_hover(n) for n in nodes]
    data: list[dict] = []
    for decision in ("accepted", "rescued", "rejected", "unreached"):
        idx = [i for i, n in enumerate(nodes) if n.decision == decision]
        if idx:
            data.append({"type": "bar", "x": [cats[i] for i in idx], "y": [nodes[i].p for i in idx], "name": decision,
                         "marker": {"color": DECISION_COLORS[decision]}, "hovertext": [hover[i] for i in idx],
                         "hoverinfo": "text", "legendgroup": decision, "xaxis": "x", "yaxis": "y"})
    prob = [i for i, n in enumerate(nodes) if not gates[i] and n.threshold is not None]
    if prob:
        data.append({"type": "scatter", "x": [cats[i] for i in prob], "y": [nodes[i].threshold for i in prob],
                     "mode": "markers", "name": "threshold",
                     "marker": {"symbol": "line-ew", "size": 26, "color": "#000000", "line": {"width": 3, "color": "#000000"}},
                     "hovertext": [hover[i] for i in prob], "hoverinfo": "text", "xaxis": "x", "yaxis": "y"})
    data.append({"type": "scatter", "x": cats, "y": [n.entropy for n in nodes], "mode": "lines+markers",
                 "name": "entropy (nats)", "line": {"color": "#7f7f7f", "dash": "dot"}, "marker": {"size": 5},
                 "hoverinfo": "skip", "xaxis": "x", "yaxis": "y2"})
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
        data.append({"type": "bar", "x": [cats[i] for i in gated], "y": [nodes[i].logit_gap for i in gated],
                     "name": "logit gap", "marker": {"color": [DECISION_COLORS.get(nodes[i].decision, "#999") for i in gated]},
                     "hovertext": [hover[i] for i in gated], "hoverinfo": "text", "showlegend": False,
                     "xaxis": "x2", "yaxis": "y3"})
        limits = [(i, nodes[i].threshold if nodes[i].threshold is not None else tau) for i in gated]
        limits = [(i, t) for i, t in limits if t is not None and 0 < t <= 1]
        if limits:
            data.append({"type": "scatter", "x": [cats[i] for i, _ in limits], "y": [-math.log(t) for _, t in limits],
                         "mode": "markers", "name": "−ln τ",
                         "marker": {"symbol": "line-ew", "size": 26, "color": "#000000", "line": {"width": 3, "color": "#ff7f0e"}},
                         "hovertext": [f"τ {t:.4g}, −ln τ {-math.log(t):.4g}" for _, t in limits], "hoverinfo": "text",
                         "xaxis": "x2", "yaxis": "y3"})
        layout["xaxis2"] = {**xaxis, "anchor": "y3", "matches": "x"}
        layout["yaxis3"] = {"title": {"text": "logit gap"}, "domain": [0.0, 0.31], "anchor": "x2"}
        layout["annotations"].append(_subplot_title("CSD gate: logit gap vs −ln τ", 0.31))
    layout.update({"barmode": "overlay", "height": 340 + 220 * (rows - 1),
                   "title": {"text": f"step {step.index}: thresholds", "font": {"size": 14}},
                   "margin": {"l": 50, "r": 50, "t": 60, "b": 60}, "hovermode": "closest"})
    return fast_figure(data, layout)


def _subplot_title(text: str, top: float) -> dict:
    return {"text": text, "x": 0.5, "xref": "paper", "xanchor": "center", "y": top, "yref": "paper",
            "yanchor": "bottom", "showarrow": False, "font": {"size": 13}}


@functools.lru_cache(maxsize=1)
def _template() -> dict:
    return pio.templates["plotly_white"].to_plotly_json()


def fast_figure(data: list[dict], layout: dict) -> go.Figure:
    """A Figure from plain dicts without Plotly's property validation (~0.5 ms instead of ~15-30 ms):
    for the figures the replay redraws on every step switch; their dicts are written against Plotly's schema."""
    return go.Figure(data=data, layout={"template": _template(), **layout}, _validate=False)


# ---------------------------------------------------------------- analytics over runs

@dataclass
class _Run:
    label: str
    trace: RunTrace | None
    record: Any  # the caller's object (dict, summary, stored run)


def _collect(runs: Iterable[Any]) -> list[_Run]:
    """Runs as (unique label, trace if any); accepts RunTrace, (label, trace) pairs, StoredRun-like
    objects and dicts."""
    out, seen = [], Counter()
    for r in runs or ():
        if _is_pair(r):
            trace = r[1]
        elif isinstance(r, RunTrace):
            trace = r
        elif isinstance(r, Mapping):
            trace = r.get("trace")
        else:
            trace = getattr(r, "trace", None)
        label = run_label(r)
        seen[label] += 1
        if seen[label] > 1:  # two runs of one method side by side must stay two series
            label = f"{label} ({seen[label]})"
        out.append(_Run(label, trace if isinstance(trace, RunTrace) else None, r))
    return out


def _accept_lengths(run: _Run) -> list[int]:
    if run.trace is not None:
        return run.trace.accept_lengths
    if isinstance(run.record, Mapping):
        return list(run.record.get("accept_lengths") or [])
    return list(getattr(run.record, "accept_lengths", None) or [])


def accept_hist_figure(runs: Sequence[Any]) -> go.Figure:
    """How many tokens each step emitted (bonus included), as step counts per run."""
    collected = [(r.label, _accept_lengths(r)) for r in _collect(runs)]
    collected = [(label, lengths) for label, lengths in collected if lengths]
    if not collected:
        return empty_figure(NO_RUNS if not runs else "no step lengths in the selected runs")
    lo = min(min(lengths) for _, lengths in collected)
    hi = max(max(lengths) for _, lengths in collected)
    xs = list(range(lo, hi + 1))
    fig = go.Figure()
    for label, lengths in collected:
        counts = Counter(lengths)
        fig.add_trace(go.Bar(
            x=xs, y=[counts[x] for x in xs], name=label,
            customdata=[100 * counts[x] / len(lengths) for x in xs],
            hovertemplate=f"{html.escape(label)}<br>%{{x}} tokens: %{{y}} steps (%{{customdata:.1f}}%)<extra></extra>",
        ))
    fig.update_layout(barmode="group", template="plotly_white", title="tokens per step",
                      xaxis={"title": "tokens emitted in the step", "dtick": 1}, yaxis={"title": "steps"},
                      height=360, margin={"t": 50})
    return fig


def _rate_figure(runs: Sequence[Any], key: Callable[[NodeTrace], Any], title: str, x_title: str,
                 kind: str) -> go.Figure:
    # core.stats.acceptance_by is the one per-source / per-depth acceptance: accepted ÷ verified nodes.
    collected = [(r.label, acceptance_by(r.trace, key)) for r in _collect(runs) if r.trace is not None]
    collected = [(label, table) for label, table in collected if table]
    if not collected:
        return empty_figure(NO_RUNS if not runs else "no node records in the selected runs")
    fig = go.Figure()
    for label, table in collected:
        keys = list(table)
        common = dict(
            x=keys, y=[table[k][0] / table[k][1] for k in keys], name=label,
            customdata=[list(table[k]) for k in keys],
            hovertemplate=(f"{html.escape(label)}<br>{x_title} %{{x}}: %{{y:.1%}} "
                           "(%{customdata[0]} of %{customdata[1]})<extra></extra>"),
        )
        fig.add_trace(go.Scatter(mode="lines+markers", **common) if kind == "line" else go.Bar(**common))
    fig.update_layout(template="plotly_white", title=title, barmode="group", height=360, margin={"t": 50},
                      xaxis={"title": x_title, **({"dtick": 1} if kind == "line" else {})},
                      yaxis={"title": "accepted / verified", "range": [0, 1.05], "tickformat": ".0%"})
    return fig


def accept_by_depth_figure(runs: Sequence[Any]) -> go.Figure:
    """Acceptance by depth in the draft tree: accepted ÷ verified draft nodes (core.stats.acceptance_by)."""
    return _rate_figure(runs, lambda n: n.depth, "acceptance by depth", "depth", "line")


def accept_by_source_figure(runs: Sequence[Any]) -> go.Figure:
    """Acceptance by where the drafter took the nodes from: accepted ÷ verified (core.stats.acceptance_by)."""
    return _rate_figure(runs, lambda n: n.source, "acceptance by source", "source", "bar")


def _metric(row: Any, name: str) -> float | None:
    """A metric from a flat dict row, its "metrics" dict, or a summary / trace object."""
    if _is_pair(row):
        row = row[1]
    if isinstance(row, Mapping):
        value = row.get(name)
        if value is None and isinstance(row.get("metrics"), Mapping):
            value = row["metrics"].get(name)
        return value
    if isinstance(row, RunTrace):
        return run_metrics(row).get(name)
    metrics = getattr(row, "metrics", None)
    return metrics.get(name) if isinstance(metrics, Mapping) else None


def runs_bar_figure(rows: Sequence[Any]) -> go.Figure:
    """MAL and tokens/s per run, side by side."""
    collected = _collect(rows)
    if not collected:
        return empty_figure()
    labels = [r.label for r in collected]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("MAL (tokens per step)", "tokens / s"))
    for col, (name, color) in enumerate((("mal", "#1f77b4"), ("tps", "#2ca02c")), start=1):
        values = [_metric(r.record, name) for r in collected]
        fig.add_trace(go.Bar(x=labels, y=values, name=name, marker_color=color, showlegend=False,
                             text=[_num(float(v)) if v is not None else "" for v in values], textposition="outside"),
                      row=1, col=col)
    fig.update_layout(template="plotly_white", height=360, margin={"t": 50})
    return fig


def sweep_figure(runs: Sequence[Any], param: str) -> go.Figure:
    """MAL against one parameter, a line per method (e.g. the runs of a stored bench sweep).

    Runs at the same value (several tasks) are pooled: their tokens over their steps, as MAL is
    defined. Runs whose parameters lack `param` are left out.
    """
    collected = _collect(runs)
    if not collected:
        return empty_figure()
    pooled: dict[str, dict[float, list[int]]] = {}  # method -> value -> [tokens, steps, runs]
    for r in collected:
        value = r.trace.params.get(param) if r.trace is not None else None
        lengths = _accept_lengths(r)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not lengths:
            continue
        acc = pooled.setdefault(r.trace.method, {}).setdefault(float(value), [0, 0, 0])
        acc[0] += sum(lengths)
        acc[1] += len(lengths)
        acc[2] += 1
    if not pooled:
        return empty_figure(f"no selected run has the parameter {param!r}")
    fig = go.Figure()
    for method, by_value in pooled.items():
        xs = sorted(by_value)
        fig.add_trace(go.Scatter(
            x=xs, y=[by_value[x][0] / by_value[x][1] for x in xs], mode="lines+markers", name=method,
            customdata=[by_value[x][2] for x in xs],
            hovertemplate=f"{html.escape(method)}<br>{html.escape(param)} %{{x}}: MAL %{{y:.3f}} "
                          "(%{customdata} runs)<extra></extra>",
        ))
    fig.update_layout(template="plotly_white", title=f"MAL against {param}", height=360, margin={"t": 50},
                      xaxis={"title": param}, yaxis={"title": "MAL (tokens per step)"})
    return fig


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
        fig.add_trace(go.Scatter(x=deltas, y=ys, mode="lines+markers", name=dataset, line={"color": color},
                                 hovertemplate=f"{html.escape(dataset)}<br>δ %{{x:g}}: %{{y:.2f}}<extra></extra>"))
        base = data.get(f"greedy_{metric}")
        if base is not None:
            fig.add_trace(go.Scatter(x=[deltas[0], deltas[-1]], y=[base, base], mode="lines", name=f"{dataset} greedy",
                                     line={"color": color, "dash": "dot"}, showlegend=False,
                                     hovertemplate=f"{html.escape(dataset)} greedy: %{{y:.2f}}<extra></extra>"))
    fig.update_layout(template="plotly_white", title=f"CASD: {name} against the threshold δ (dotted: greedy)", height=420,
                      margin={"t": 60}, yaxis={"title": name},
                      xaxis={"title": "δ", "type": "log", "autorange": "reversed", "tickvals": deltas, "ticktext": [f"{d:g}" for d in deltas]})
    return fig


def position_figure(run: RunTrace, label: str | None = None) -> go.Figure:
    """Acceptance per draft position (core.stats.position_acceptance): at position d, the share of the
    steps offering a judged node at depth d that accepted at least d tokens; bars labelled "accepted/offered"."""
    table = position_acceptance(run) if run is not None else {}
    if not table:
        return empty_figure("no judged draft nodes in this run" if run is not None else NO_RUNS)
    depths = list(table)
    rates = [table[d][0] / table[d][1] if table[d][1] else 0.0 for d in depths]
    name = label or run_label(run)
    data = [{"type": "bar", "x": depths, "y": rates, "name": name, "marker": {"color": DECISION_COLORS["accepted"]},
             "text": [f"{table[d][0]}/{table[d][1]}" for d in depths], "textposition": "outside",
             "customdata": [list(table[d]) for d in depths],
             "hovertemplate": (f"{html.escape(name)}<br>position %{{x}}: %{{y:.1%}} "
                               "(%{customdata[0]} of %{customdata[1]} steps)<extra></extra>")}]
    return fast_figure(data, {
        "title": {"text": f"{html.escape(name)}: acceptance per draft position (given the positions before it accepted)",
                  "font": {"size": 14}},
        "height": 360, "margin": {"l": 50, "r": 20, "t": 60, "b": 50}, "showlegend": False,
        "xaxis": {"title": {"text": "draft position d (1 = first token after the root)"}, "dtick": 1},
        "yaxis": {"title": {"text": "accepted / offered"}, "range": [0, 1.12], "tickformat": ".0%"},
    })
