"""The speed-quality frontier per relaxed rule (`report --frontier`, workbench.evaluation.frontier) and its figure."""

from __future__ import annotations

import json

import pytest

from core.errors import InvalidInputError
from workbench.evaluation.frontier import SWEEPS, best_per_rule, format_frontier, parse_rules
from workbench.ui.figures.frontier import WORST, frontier_figure, frontier_view, point_change


def point(rule, spec, speedup, admissible, qa=(0.0, -0.5, 0.5), summ=(0.0, -0.2, 0.2), mal=1.5):
    fams = {
        "qa": dict(zip(("mean", "low", "high"), qa), items=4),
        "summ": dict(zip(("mean", "low", "high"), summ), items=4),
    }
    failing = tuple(f for f, i in fams.items() if i["low"] < -1)
    return {
        "rule": rule,
        "spec": spec,
        "speedup": speedup,
        "mal": mal,
        "admissible": admissible,
        "families": fams,
        "failing": failing,
    }


RESULT = {
    "families": ["qa", "summ"],
    "greedy": {"tps": 10.0, "mal": 1.0},
    "points": [
        point("A", "a1", 1.1, True),
        point("A", "a2", 1.6, False, qa=(-8.0, -12.0, -4.0)),
        point("A", "a3", 1.3, True, summ=(-0.5, -0.9, 0.0)),
        point("B", "b1", 1.2, False, qa=(-2, -3, -1)),
    ],
}


def test_each_rule_gets_its_fastest_admissible_setting_and_the_table_shows_every_interval():
    best = best_per_rule(RESULT["points"])
    assert best["A"]["spec"] == "a3" and best["B"] is None  # a2 is faster but loses 8 points of qa
    assert best_per_rule(RESULT["points"], "mal")["A"]["spec"] == "a1"  # all MAL equal: the earlier
    md = format_frontier(RESULT)
    assert "| A | `a2` | 1.60 | 1.50 | -8.0 [-12.0, -4.0] | +0.0 [-0.2, +0.2] | no: qa |" in md
    assert "- A: `a3`, 1.30x greedy" in md and "- B: none admissible" in md


def test_rules_parse_to_their_sweeps_and_unknown_rules_are_one_error():
    assert list(parse_rules("typical,fly")) == ["typical (Medusa)", "entropy-gated deferred (FLy)"]
    assert len(parse_rules(None)) == len(SWEEPS) == 6
    specs = [s for ss in SWEEPS.values() for s in ss]
    assert len(set(specs)) == len(specs)
    from workbench.methods import parse_method_spec, resolve_params

    for s in specs:  # every swept setting is a valid method spec
        resolve_params(*parse_method_spec(s))
    with pytest.raises(InvalidInputError, match="unknown rule"):
        parse_rules("aasd,medusa")


def test_the_figure_draws_a_line_per_rule_at_the_worst_familys_change():
    assert point_change(RESULT["points"][1])["mean"] == -8.0  # qa's lower bound is the lowest
    assert (
        point_change(RESULT["points"][2], "summ")["low"] == -0.9 and point_change(RESULT["points"][2], "code") is None
    )
    fig = frontier_figure(RESULT)
    lines = {t.name: t for t in fig.data}
    assert set(lines) == {"A", "B", "greedy"}
    assert list(lines["A"].y) == [1.1, 1.3, 1.6] and list(lines["A"].x) == [0.0, -0.5, -8.0]  # sorted by speed-up
    assert list(lines["A"].error_x.arrayminus) == [0.5, pytest.approx(0.4), 4.0]
    assert "no frontier here" in frontier_figure({"points": []}).layout.annotations[0].text


def test_the_view_reads_a_folder_below_the_working_folder_and_refuses_others(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "frontier.json").write_text(json.dumps(RESULT))
    fig, md = frontier_view("out", WORST)
    assert len(fig.data) == 3 and "| B | `b1` |" in md
    assert "no frontier at" in frontier_view("missing")[1]
    assert "below the server's working folder" in frontier_view("../..")[1]
    (tmp_path / "bad.json").write_text("{}")
    assert "no frontier at" in frontier_view("bad.json")[1]


def test_report_frontier_runs_the_sweeps_on_held_out_family_items(tiny, tmp_path, monkeypatch, capsys, spec_bench):
    import workbench.evaluation.bench as bench
    from workbench.commands import common
    from workbench.commands.main import main

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:60])
    monkeypatch.setattr(common, "load_models", lambda args: (tiny, None))
    out = tmp_path / "frontier"
    argv = [
        "report",
        "--frontier",
        "--families",
        "summarization,rag",
        "--limit",
        "1",
        "--rules",
        "casd,typical,fly",
        "--max-new-tokens",
        "4",
        "--max-nodes",
        "8",
        "--no-store",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    result = json.loads((out / "frontier.json").read_text())
    assert result["families"] == ["summarization", "rag"] and result["config"]["split"] == "held_out"
    assert [p["spec"] for p in result["points"]] == list(
        SWEEPS["fixed δ (casd)"] + SWEEPS["typical (Medusa)"] + SWEEPS["entropy-gated deferred (FLy)"]
    )
    held = {r["id"] for r in result["rows"]}
    from workbench.evaluation.families import family_tasks

    assert held == {family_tasks(f, "held_out", 1)[0].id for f in ("summarization", "rag")}  # held-out items only
    assert (out / "frontier.md").read_text().startswith("| rule | setting |") and (
        out / "figures" / "frontier.html"
    ).exists()
    assert main(["report", "--frontier", "--rules", "medusa", "--out", str(out)]) == 2  # one-line error, no model
    assert "unknown rule" in capsys.readouterr().err
