"""The Analytics tab's figures over stored runs: tokens per step, acceptance by depth and by source, MAL and
tokens/s per run, MAL against a parameter. Runs come as RunTrace, (label, trace) pairs, stored runs or dicts."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.stats import ACCEPTANCE_MEANING, NODE_ACCEPTANCE, acceptance_by, run_metrics
from core.thresholds import FITTED_PARAMS
from core.trace import NodeTrace, RunTrace
from workbench.ui.figures.common import NO_RUNS, TITLE_BELOW_TOOLBAR, empty_figure, is_pair, run_label
from workbench.ui.shared import asked_as


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
        if is_pair(r):
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
        fig.add_trace(
            go.Bar(
                x=xs,
                y=[counts[x] for x in xs],
                name=label,
                customdata=[100 * counts[x] / len(lengths) for x in xs],
                hovertemplate=f"{html.escape(label)}<br>%{{x}} tokens: %{{y}} steps (%{{customdata:.1f}}%)<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        template="plotly_white",
        title="tokens per step",
        xaxis={"title": "tokens emitted in the step", "dtick": 1},
        yaxis={"title": "steps"},
        height=360,
        margin={"t": 50},
    )
    return fig


# the axis in the help line's words (core.stats.ACCEPTANCE_MEANING: "accepted ÷ judged draft nodes ...")
NODE_ACCEPTANCE_AXIS = f"{NODE_ACCEPTANCE}: accepted ÷ judged"


def _rate_figure(
    runs: Sequence[Any], key: Callable[[NodeTrace], Any], title: str, x_title: str, kind: str
) -> go.Figure:
    # core.stats.acceptance_by is the one per-source / per-depth acceptance: accepted ÷ judged (verified) nodes.
    collected = [(r.label, acceptance_by(r.trace, key)) for r in _collect(runs) if r.trace is not None]
    collected = [(label, table) for label, table in collected if table]
    if not collected:
        # Replay draws one run: it says "this run", as its other empty panel does (the twenty-first newcomer pass)
        where = "this run" if runs and len(runs) == 1 else "the selected runs"
        return empty_figure(NO_RUNS if not runs else f"no judged draft nodes in {where}")
    fig = go.Figure()
    for label, table in collected:
        keys = list(table)
        common = dict(
            x=keys,
            y=[table[k][0] / table[k][1] for k in keys],
            name=label,
            customdata=[list(table[k]) for k in keys],
            hovertemplate=(
                f"{html.escape(label)}<br>{x_title} %{{x}}: %{{y:.1%}} "
                "(%{customdata[0]} of %{customdata[1]})<extra></extra>"
            ),
        )
        if kind == "line":
            fig.add_trace(go.Scatter(mode="lines+markers", **common))
        else:  # a label on every bar: a judged source never accepted has no bar to see, and must not read as no data
            # (outside: Plotly drops 'auto' and 'inside' text on a zero-height bar)
            rates = [f"{table[k][0] / table[k][1]:.0%}" for k in keys]
            fig.add_trace(go.Bar(text=rates, textposition="outside", cliponaxis=False, **common))
    fig.update_layout(
        template="plotly_white",
        title=title,
        barmode="group",
        height=360,
        margin={"t": 50},
        xaxis={"title": x_title, **({"dtick": 1} if kind == "line" else {})},
        # bars: room above 100 % for its label, as position_figure leaves
        yaxis={"title": NODE_ACCEPTANCE_AXIS, "range": [0, 1.05 if kind == "line" else 1.12], "tickformat": ".0%"},
    )
    return fig


def titled(name: str, by: str) -> str:
    """A figure title: one of core.stats' acceptance names (its meaning: the tab's help line, acceptance_help; a
    second title line would run under Plotly's toolbar in a half-width figure)."""
    return f"{html.escape(name)} {by}"


def acceptance_help(name: str) -> str:
    """The one-line meaning of one of core.stats' acceptance names, as a help line beside its figures."""
    return f"**{name}**: {ACCEPTANCE_MEANING[name]}"


def accept_by_depth_figure(runs: Sequence[Any]) -> go.Figure:
    """Node acceptance by depth in the draft tree: accepted ÷ verified draft nodes (core.stats.acceptance_by)."""
    return _rate_figure(runs, lambda n: n.depth, titled(NODE_ACCEPTANCE, "by depth"), "depth", "line")


def accept_by_source_figure(runs: Sequence[Any]) -> go.Figure:
    """Node acceptance by where the drafter took the nodes from: accepted ÷ verified (core.stats.acceptance_by)."""
    return _rate_figure(runs, lambda n: n.source, titled(NODE_ACCEPTANCE, "by source"), "source", "bar")


def _metric(row: Any, name: str) -> float | None:
    """A metric from a flat dict row, its "metrics" dict, or a summary / trace object."""
    if is_pair(row):
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


LABEL_FORMATS = {"mal": ".2f", "tps": ".1f"}  # as the Compare columns print them (9.0 tok/s, not 9.021)


def reads_param(method: str, param: str) -> bool:
    """Whether `method` takes `param` at all (greedy and csd take no α): a sweep counts only the runs that do."""
    from workbench.methods import get_method

    try:
        return param in get_method(method).params
    except Exception:  # noqa: BLE001 - a method this install does not know: its stored params are all there is
        return True


def was_fitted(trace: RunTrace, param: str) -> bool:
    """Whether the run's value of `param` came from a fit (aasd[auto]: core.methods copies the fit's values into
    the run's parameters, so the value stored is the one it used)."""
    return bool(trace.params.get("fitted")) and param in FITTED_PARAMS.get(trace.method, ())


def one_value(param: str, value: float, takers: Counter[tuple[str, bool]], chosen: int) -> str:
    """Why there is nothing to sweep: how many of the `chosen` runs take `param` (`takers`: each as asked for, and
    whether a fit set its value), and the one value they used, e.g. "one chosen run takes alpha (aasd[auto], fitted
    alpha = 0.1): nothing to sweep". Runs whose method takes no such parameter are not counted: greedy's stored α
    is a default it never read."""
    runs = sum(takers.values())
    if runs == 1:
        ((asked, fitted),) = takers
        return f"one chosen run takes {param} ({asked}, {'fitted ' if fitted else ''}{param} = {value:g}): nothing to sweep"
    named = "; ".join(
        f"{asked}{', fitted' if fitted else ''}{f' ×{n}' if n > 1 else ''}" for (asked, fitted), n in takers.items()
    )
    if runs == chosen:
        which = "both chosen runs take" if runs == 2 else f"all {runs} chosen runs take"
    else:
        which = f"{runs} of the {chosen} chosen runs take"
    return f"{which} {param}, each at {param} = {value:g} ({named}): nothing to sweep"


def runs_bar_figure(rows: Sequence[Any]) -> go.Figure:
    """MAL and tokens/s per run, side by side; tokens/s is the wall clock's, as in Compare, and its title says so."""
    collected = _collect(rows)
    if not collected:
        return empty_figure()
    labels = [r.label for r in collected]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("MAL (tokens per step)", "tokens / s (wall clock)"))
    for col, (name, color) in enumerate((("mal", "#1f77b4"), ("tps", "#2ca02c")), start=1):
        values = [_metric(r.record, name) for r in collected]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=values,
                name=name,
                marker_color=color,
                showlegend=False,
                text=[f"{float(v):{LABEL_FORMATS[name]}}" if v is not None else "" for v in values],
                textposition="outside",
            ),
            row=1,
            col=col,
        )
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
    takers: Counter[tuple[str, bool]] = Counter()  # the counted runs: as asked for, whether a fit set the value
    example: str | None = None
    for r in collected:
        reads = r.trace is not None and reads_param(r.trace.method, param)
        value = r.trace.params.get(param) if reads else None
        lengths = _accept_lengths(r)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not lengths:
            continue
        asked = asked_as(r.trace.method, r.trace.params, leave_out=(param,))  # a line per method, whatever its value
        takers[asked, was_fitted(r.trace, param)] += 1
        example = example or r.trace.method  # a method that takes the parameter, for the hint below
        acc = pooled.setdefault(asked, {}).setdefault(float(value), [0, 0, 0])
        acc[0] += sum(lengths)
        acc[1] += len(lengths)
        acc[2] += 1
    if not pooled:
        return empty_figure(f"no selected run has the parameter {param!r}")
    values = sorted({v for by_value in pooled.values() for v in by_value})
    if len(values) < 2:  # one point on an axis Plotly would stretch around it: say what a sweep needs instead
        return empty_figure(
            f"MAL against {param}: {one_value(param, values[0], takers, len(collected))}.<br>Choose runs made at two "
            f"or more values<br>(e.g. method variants such as {example}[{param}=…] in one comparison)."
        )
    fig = go.Figure()
    for method, by_value in pooled.items():
        xs = sorted(by_value)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[by_value[x][0] / by_value[x][1] for x in xs],
                mode="lines+markers",
                name=method,
                customdata=[by_value[x][2] for x in xs],
                hovertemplate=f"{html.escape(method)}<br>{html.escape(param)} %{{x}}: MAL %{{y:.3f}} "
                "(%{customdata} runs)<extra></extra>",
            )
        )
    fig.update_layout(
        template="plotly_white",
        title=f"MAL against {param}",
        height=360,
        margin={"t": 50},
        xaxis={"title": param},
        yaxis={"title": "MAL (tokens per step)"},
    )
    return fig


def shares(fig: go.Figure) -> go.Figure:
    """The tokens-per-step histogram as each run's share of its steps (runs of different lengths compare);
    accept_hist_figure puts that share, in %, in each bar's customdata."""
    for trace in fig.data:
        if trace.type == "bar" and trace.customdata is not None:
            counts = trace.y
            trace.update(
                y=[c / 100 for c in trace.customdata],
                customdata=counts,
                hovertemplate=f"{trace.name}<br>%{{x}} tokens: %{{y:.1%}} of its steps (%{{customdata}} steps)<extra></extra>",
            )
    fig.update_layout(yaxis={"title": "share of the run's steps", "tickformat": ".0%"})
    return fig


# The legend's top, in px from the figure's top: under the title (TITLE_BELOW_TOOLBAR: a 34 px pad, then one line).
LEGEND_TOP = 64
DEFAULT_HEIGHT = 450  # Plotly's, for a figure that sets none


def legend_under_title(height: float) -> dict:
    """A legend in rows between the title and the plot, its top at LEGEND_TOP px. It is placed in the figure's own
    coordinates (yref container), for which Plotly reserves the top margin down to the legend's last row: more runs
    wrap to more rows and push the plot down. Anchored to the plot's top instead (y 1.02), a legend that wrapped
    grew upward into the title ("tokens per step" covered "#243 greedy")."""
    return {
        "orientation": "h",
        "yref": "container",
        "y": 1 - LEGEND_TOP / height,
        "yanchor": "top",
        "xanchor": "left",
        "x": 0,
    }


DASHES = ("solid", "dash", "dot", "dashdot")  # a method's first run, second, …: lines
PATTERNS = ("", "/", ".", "x")  # and bars


def restyled(fig: go.Figure, colors: dict[str, str]) -> go.Figure:
    """Each run in its colour (the same in every plot), the legend in rows between the title and the plot (long run
    labels no longer cover the data, nor the title) and room for bar labels (the tallest bar's number is not cut
    off). Runs of one method share its colour; the second, third, … of them is dashed or hatched, so two runs of a
    method are told apart (the twenty-first newcomer pass saw #2 aasd[auto]'s line hidden under #6's, both red)."""
    seen: Counter[str] = Counter()  # runs drawn so far in each colour

    def nth(label: str) -> int:
        seen[colors[label]] += 1
        return seen[colors[label]] - 1

    for trace in fig.data:
        if trace.name in colors:
            k = nth(trace.name)
            trace.update(marker_color=colors[trace.name])
            if trace.type == "scatter":
                trace.update(line_color=colors[trace.name], line_dash=DASHES[k % len(DASHES)])
            elif trace.type == "bar":
                trace.update(marker_pattern_shape=PATTERNS[k % len(PATTERNS)])
        elif trace.type == "bar" and trace.x is not None and all(x in colors for x in trace.x):
            seen.clear()  # a bar per run (MAL and tokens/s): the same runs again, each bar hatched as its run
            trace.update(
                marker_color=[colors[x] for x in trace.x],
                marker_pattern_shape=[PATTERNS[nth(x) % len(PATTERNS)] for x in trace.x],
            )
        if trace.type == "bar" and trace.text is not None:
            trace.update(cliponaxis=False)
    # the title under Plotly's toolbar, the legend in rows between the title and the plot
    fig.update_layout(
        legend=legend_under_title(fig.layout.height or DEFAULT_HEIGHT),
        margin={"l": 60, "r": 20, "t": 100, "b": 60},
        title=TITLE_BELOW_TOOLBAR,
    )
    fig.update_yaxes(automargin=True)
    fig.update_xaxes(automargin=True)
    for axis in ("yaxis", "yaxis2"):  # headroom over the tallest labelled bar
        bars = [
            t
            for t in fig.data
            if t.type == "bar" and t.text is not None and (t.yaxis or "y") == axis.replace("axis", "")
        ]
        tops = [v for t in bars for v in (t.y or ()) if v is not None]
        if tops and fig.layout[axis].range is None:  # a rate's fixed axis stays (all 0 %: [0, 0] hid the bars)
            fig.update_layout({axis: {"range": [0, max(tops) * 1.18]}})
    return fig
