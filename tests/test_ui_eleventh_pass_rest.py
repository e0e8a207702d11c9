"""Eleventh newcomer pass, all but the Compare tab: Replay's slider labels follow the chosen rule, the README's bench
counts, `calibrate`'s help line, a file given as the model, and Analytics' one-value sweep. Each test fails on the
code before its fix."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.errors import WorkbenchError
from core.trace import RunTrace

ROOT = Path(__file__).resolve().parents[1]
FITTED = {"alpha": 0.1, "beta": 0.3, "alpha_alignment": 0.1, "beta_alignment": 0.3, "fitted": 1, "max_new_tokens": 2}


def _trace(method: str, params: dict, lengths: list[int] | None = None) -> RunTrace:
    run = RunTrace(method, dict(params), "m", None, "cpu", "float32", "p", [1, 2], status="complete")
    if lengths is not None:
        run.external_accept_lengths = lengths
    return run


# -- item 4: on an aasd[auto] run judged by aasd-fixed, δ is active and its label must not say "not used" ------------
def test_the_sliders_labels_follow_the_rule_chosen_to_judge(tmp_path):
    """aasd-fixed's rule made δ active and drove the re-score, while δ's label still said "not used by aasd: shows the
    default". Mutation caught: active() returning interactive only (the old code) leaves the open()'s labels."""
    from workbench.store import Store
    from workbench.ui import replay_view as rv
    from workbench.ui.replay_tab import ReplayHandlers
    from workbench.ui.shared import TUNABLE, RunCache

    run = _trace("aasd", FITTED)
    assert "not used by aasd" in rv.slider_label("delta", run.params, "aasd")  # the run's own rule: δ unused
    labels = dict(zip(TUNABLE, rv.slider_labels(run, "aasd-fixed")))
    assert "not used" not in labels["delta"] and "not read" not in labels["delta"], labels["delta"]
    assert "not read by aasd-fixed's rule" in labels["lam"]
    assert dict(zip(TUNABLE, rv.slider_labels(run))) == {n: rv.slider_label(n, run.params, "aasd") for n in TUNABLE}

    store = Store(str(tmp_path / "t.db"))
    rid = store.save_run(run)
    h = ReplayHandlers(store, None, RunCache(store))
    request = SimpleNamespace(session_hash="s")
    judged = dict(zip(TUNABLE, h.active(request, rid, "aasd-fixed")))
    assert judged["delta"]["interactive"] is True and "not used" not in judged["delta"]["label"]
    own = dict(zip(TUNABLE, h.active(request, rid, rv.OWN_RULE)))  # back to the run's own rule: its labels again
    assert own["delta"]["interactive"] is False and "not used by aasd" in own["delta"]["label"]


def test_alignment_note_only_where_the_judging_rule_keeps_the_alignment_values():
    """aasd-fixed reads no alignment α, β (the re-score keeps only what the rule takes): its α label must not say
    the alignment nodes keep the run's own."""
    from workbench.ui import replay_view as rv

    run = _trace("aasd", FITTED)
    assert "alignment nodes keep" in rv.slider_label("alpha", run.params, "aasd")
    assert "alignment nodes keep" in rv.slider_label("alpha", run.params, "aasd", judge="aasd")
    assert "alignment nodes keep" not in rv.slider_label("alpha", run.params, "aasd", judge="casd")


# -- item 6: README's bench counts: --limit is tasks per category --------------------------------------------------
def test_the_readmes_bench_counts_are_what_the_command_does():
    """README said "20 items × 4 methods = 160 decodes" and "`--limit 1` (4 decodes)"; --limit counts tasks per
    category, and the command names two: 40 items, and 2 items (8 decodes) at --limit 1."""
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"bench --data \S+ --categories (\S+) \\\n\s+--limit 20 --methods (\S+)", readme)
    assert command, "the README's bench command moved: update this test"
    categories, methods = command.group(1).split(","), command.group(2).split(",")
    assert "greedy" in methods  # else bench adds it: one more method
    items = 20 * len(categories)
    assert (
        f"{len(categories)} categories × 20 = {items} items × {len(methods)} methods = {items * len(methods)} decodes"
        in readme
    )
    assert f"`--limit 1` is\n# {len(categories)} items, {len(categories) * len(methods)} decodes" in readme
    assert "(4 decodes)" not in readme and "20 items × 4 methods" not in readme


# -- item 7: the top-level help names calibrate's three jobs -------------------------------------------------------
def test_top_level_help_names_calibrates_three_jobs():
    from workbench.commands.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    line = next(a.help for a in sub._choices_actions if a.dest == "calibrate")
    assert "--thresholds" in line and "--timing" in line and "correction memory" in line, line
    assert "aasd[auto]" in line and "t(n, L)" in line, line


# -- item 8: an existing file is "a file, not a model folder", not "not found" -------------------------------------
def test_a_file_given_as_the_model_is_called_a_file(tmp_path):
    from core.models import load_model

    png = tmp_path / "upload.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(WorkbenchError) as e:
        load_model(str(png), device="cpu", dtype="float32", cache=False)
    assert "is a file, not a model folder" in str(e.value) and ".gguf" in str(e.value), str(e.value)
    assert "not found" not in str(e.value)
    with pytest.raises(WorkbenchError, match="model folder not found"):  # a path that does not exist: as before
        load_model(str(tmp_path / "no-such-folder"), device="cpu", dtype="float32", cache=False)


# -- item 9: the one-value sweep counts only the runs that take the parameter, with the value each used ------------
def test_the_one_value_sweep_names_the_runs_that_take_the_parameter_and_their_fitted_value():
    """greedy, aasd[auto] and csd: "every chosen run used alpha = 0.1", though greedy and csd take no α and the aasd
    run's α came from its fit. Mutation caught: the old words ("every chosen run used")."""
    from workbench.ui.figures.analytics import sweep_figure

    runs = [
        _trace("greedy", {"alpha": 0.1}, [1, 1]),
        _trace("aasd", {**FITTED, "alpha": 0.0}, [3, 2]),
        _trace("csd", {"alpha": 0.1}, [2]),
    ]
    text = sweep_figure(runs, "alpha").layout.annotations[0].text
    assert "every chosen run" not in text, text
    assert "one chosen run takes alpha (aasd[auto], fitted alpha = 0): nothing to sweep" in text, text
    two = sweep_figure([*runs, _trace("aasd", {"alpha": 0.0, "beta": 0.3}, [2])], "alpha")
    text = two.layout.annotations[0].text
    assert "2 of the 4 chosen runs take alpha, each at alpha = 0 (aasd[auto], fitted; aasd[beta=0.3])" in text, text
