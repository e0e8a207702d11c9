"""The Analytics figures' title and legend do not overlap, however many runs the legend lists (issue 33, fifth
newcomer pass: the "tokens per step" title covered the first legend entry, "#243 greedy"). Drawn by the Plotly.js
that plotly ships, in Debian's Chromium, at the width a half-page figure gets."""

from __future__ import annotations

import random

import pytest

from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.ui.analytics_tab import figures_of
from workbench.ui.figures.common import TITLE_BELOW_TOOLBAR


def _step(j: int, length: int) -> StepTrace:
    """A step that drafted `length` nodes from the context and accepted all but the last (for the acceptance figures)."""
    nodes = [NodeTrace(j, 1 + j, 0, -1, 0, 1, "", "root", "accepted", "")]
    for d in range(1, length + 1):
        nodes.append(NodeTrace(j, 1 + j, d, d - 1, d, 1, "", "context", "accepted" if d < length else "rejected", ""))
    return StepTrace(j, 1 + j, length, length - 1, [1] * length, nodes=nodes)


def _runs(n: int) -> list[tuple[str, RunTrace]]:
    rng = random.Random(n)
    methods = ("greedy", "aasd", "csd")
    return [
        (
            f"#{243 + i} {methods[i % 3]}",
            RunTrace(
                methods[i % 3],
                {"alpha": 0.5},
                "m",
                None,
                "cpu",
                "float32",
                "p",
                [1],
                steps=[_step(j, rng.randint(1, 4)) for j in range(20)],
            ),
        )
        for i in range(n)
    ]


def test_the_legend_starts_below_the_title_in_the_figures_own_pixels():
    """The legend hangs from a fixed height under the title (yref container), so rows it wraps to grow toward the
    plot, which Plotly pushes down; anchored at the plot's top (y > 1) they grew up into the title."""
    from workbench.ui.figures.analytics import LEGEND_TOP, legend_under_title

    hist = figures_of(_runs(9), "auto")[0]
    legend, height = hist.layout.legend, hist.layout.height
    assert legend.yref == "container" and legend.yanchor == "top" and legend.orientation == "h"
    assert (1 - legend.y) * height == pytest.approx(LEGEND_TOP)
    title_bottom = TITLE_BELOW_TOOLBAR["pad"]["t"] + 1.4 * (hist.layout.title.font.size or 17)  # one line of title
    assert LEGEND_TOP >= title_bottom
    assert legend_under_title(360)["y"] == pytest.approx(1 - LEGEND_TOP / 360)


def test_title_legend_and_plot_do_not_overlap_when_drawn(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    import plotly
    from browser_util import browser

    (tmp_path / "plotly.min.js").write_text(plotly.offline.get_plotlyjs())  # loaded once, beside the pages
    with sync_api.sync_playwright() as pw:
        chromium = browser(pw)
        page = chromium.new_page(viewport={"width": 760, "height": 600})
        for n_runs in (3, 9, 15):  # one row of legend, two, three
            # tokens per step, node acceptance by depth and by source: the figures with a legend
            for k, fig in enumerate(figures_of(_runs(n_runs), "auto")[:3]):
                path = tmp_path / f"fig{n_runs}-{k}.html"
                path.write_text(fig.to_html(include_plotlyjs="directory", default_width="700px", div_id="f"))
                page.goto(path.as_uri())
                page.wait_for_selector("#f .legend")
                box = page.evaluate(
                    """() => { const r = (s) => document.querySelector(s).getBoundingClientRect();
                    const f = r('#f'), size = document.getElementById('f')._fullLayout._size;
                    return {title: [r('#f .gtitle').top - f.top, r('#f .gtitle').bottom - f.top],
                            legend: [r('#f .legend').top - f.top, r('#f .legend').bottom - f.top], plotTop: size.t}; }"""
                )
                what = (fig.layout.title.text, n_runs, box)
                assert box["title"][1] <= box["legend"][0], what  # the title ends above the legend...
                assert box["legend"][1] <= box["plotTop"] + 1, what  # ...which ends above the plot
        chromium.close()
