"""Thresholds fitted to the model (`calibrate --thresholds`, `aasd[auto]`): choosing a setting from a grid's
results, the stored fit, the method spec, the rules a stored run is rebuilt with, and the fit end to end."""
from __future__ import annotations

import json
import random

import pytest

from core.errors import InvalidInputError
from core.methods import get_method, parse_method_spec, resolve_params, run_method
from core.rules import NodeStats, rule_for
from core.thresholds import LOSSLESS, describe_values, fitted_values, save_fit, thresholds_path
from workbench.evaluation.tasks import Task
from workbench.evaluation.thresholds import (Trial, choose, fit_thresholds, format_fit, grid_settings, held_out_tasks,
                                             method_spec, parse_grid)

FIT = {"alpha": 0.0, "beta": 0.03, "alpha_alignment": 0.0, "beta_alignment": 0.3}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def id_prompts(monkeypatch):
    """The tiny model's tokenizer has no encoder: bench encodes a prompt as ids made from its characters."""
    import workbench.evaluation.bench as bench

    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:60])


def trial(speedup, score, spec="s"):
    return Trial("shared", {}, spec, speedup, 1.0, score)


# ---------------------------------------------------------------- choosing (pure)

def test_the_fastest_setting_that_keeps_greedys_score_is_chosen():
    trials = [trial(1.5, 49.0, "fast-but-worse"), trial(1.3, 50.0, "ties-greedy"), trial(1.2, 51.0, "better"),
              trial(1.9, None, "unscored"), trial(None, 60.0, "untimed")]
    assert choose(trials, greedy_score=50.0).spec == "ties-greedy"
    assert choose(trials, greedy_score=50.5).spec == "better"
    assert choose([trial(1.2, 50.0, "a"), trial(1.2, 50.0, "b")], 50.0).spec == "a"  # a tie keeps the earlier


def test_no_setting_keeping_the_score_chooses_none():
    assert choose([trial(1.5, 49.0), trial(1.1, 40.0)], greedy_score=50.0) is None
    assert choose([], greedy_score=50.0) is None


def test_grids_parse_with_defaults_and_refuse_bad_input():
    grid = parse_grid("alpha=0,0.05,0.05", "aasd")
    assert grid == {"alpha": (0.0, 0.05), "beta": (0.01, 0.03, 0.1)}  # beta keeps the default grid
    assert len(grid_settings(parse_grid(None, "aasd"))) == 12 and len(grid_settings(parse_grid(None, "casd"))) == 4
    assert method_spec("aasd", {"alpha": 0.05, "beta": 0.01}) == "aasd[alpha=0.05,beta=0.01]"
    for bad, match in [("gamma=1", "NAME"), ("alpha", "NAME"), ("alpha=x", "numbers"), ("alpha=", "no values"),
                       ("beta=2", "out of range"), ("delta=0.1", "NAME")]:
        with pytest.raises(InvalidInputError, match=match):
            parse_grid(bad, "aasd")
    with pytest.raises(InvalidInputError, match="not 'pld'"):
        parse_grid(None, "pld")


def test_held_out_items_skip_the_benchmarks_share_of_each_category():
    tasks = [Task(id=f"{c}{i}", task="qa", input="x", answers=["y"], category=c) for c in "ab" for i in range(5)]
    assert [t.id for t in held_out_tasks(tasks, skip=3, per_category=1)] == ["a3", "b3"]
    assert [t.id for t in held_out_tasks(tasks, skip=3)] == ["a3", "a4", "b3", "b4"]
    with pytest.raises(InvalidInputError, match="no held-out items"):
        held_out_tasks(tasks, skip=5)
    with pytest.raises(InvalidInputError, match="none of the items has a task score"):  # before any model work
        fit_thresholds(None, [Task(id="1", task="chat", input="x"), Task(id="2", task="translation", input="x", answers=["y"])])


# ---------------------------------------------------------------- the stored fit and aasd[auto]

def test_a_fit_round_trips_beside_the_timing_curve(tiny, home):
    path = save_fit(tiny, "aasd", {"values": FIT, "relaxed": True})
    save_fit(tiny, "casd", {"values": {"delta": 0.2}, "relaxed": True})
    assert path == home / "thresholds" / "tiny-cpu-float32.json" == thresholds_path(tiny)
    stored = json.loads(path.read_text())
    assert stored["fingerprint"] == "tiny" and set(stored["fits"]) == {"aasd", "casd"} and stored["fits"]["aasd"]["fitted"]
    assert fitted_values(tiny, "aasd") == FIT and fitted_values(tiny, "casd") == {"delta": 0.2}
    assert describe_values(FIT) == "context α 0, β 0.03 · alignment α 0, β 0.3"
    assert describe_values({"delta": 0.2}) == "δ 0.2"


def test_a_missing_fit_says_which_command_makes_it(tiny, home):
    with pytest.raises(InvalidInputError, match="calibrate --thresholds --model tiny-llama --device cpu --dtype float32"):
        fitted_values(tiny, "aasd")
    with pytest.raises(InvalidInputError, match="--method casd"):
        run_method("casd", tiny, [5, 6, 7], {"fitted": 1, "max_new_tokens": 4})
    thresholds_path(tiny).parent.mkdir(parents=True)
    thresholds_path(tiny).write_text("{not json")
    with pytest.raises(InvalidInputError, match="cannot be read"):
        fitted_values(tiny, "aasd")


def test_auto_in_a_method_spec_means_the_fitted_thresholds():
    name, over = parse_method_spec("aasd[auto,max_nodes=8]")
    assert (name, over) == ("aasd", {"fitted": "1", "max_nodes": "8"}) and resolve_params(name, over)["fitted"] == 1
    assert resolve_params(*parse_method_spec("casd[auto]"))["fitted"] == 1
    with pytest.raises(InvalidInputError, match=r"\[auto\]` works for aasd, casd"):
        parse_method_spec("pld[auto]")
    with pytest.raises(InvalidInputError, match="cannot be given beside it"):
        resolve_params(*parse_method_spec("aasd[auto,beta=0.2]"))


def test_rules_are_rebuilt_from_the_recorded_values():
    """Alignment nodes judged by their own α, β; the parameters alone decide (no file is read)."""
    rules = get_method("aasd").rules_of(resolve_params("aasd", {**FIT}))
    node = NodeStats(p=0.1, entropy=1.0, max_p=0.5, p_eos=0.0, rank=1, logit_gap=1.6)
    assert rule_for(rules, "context")(node).passed and not rule_for(rules, "alignment")(node).passed
    assert not rule_for(rules, "generated")(node).passed
    plain = get_method("aasd").rules_of(resolve_params("aasd", {"alpha": 0, "beta": 0.03}))  # unset: alignment = context
    assert rule_for(plain, "alignment")(node).passed


def test_a_fitted_run_records_its_values_and_rescores_without_the_fit(tiny, home, tmp_path):
    from workbench.rescore import rescore_run
    from workbench.store import Store

    save_fit(tiny, "aasd", {"values": FIT, "relaxed": True})
    rng = random.Random(0)  # a prompt that repeats the model's own text: context and alignment drafts
    own = run_method("greedy", tiny, [rng.randrange(2, 96) for _ in range(8)], {"max_new_tokens": 24}).output_ids
    prompt = [rng.randrange(2, 96) for _ in range(6)] + own + [rng.randrange(2, 96) for _ in range(3)] + own[:5]
    run = run_method("aasd", tiny, prompt, {"fitted": 1, "max_new_tokens": 32, "max_nodes": 16})
    assert {k: run.params[k] for k in FIT} == FIT and run.params["fitted"] == 1
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    stored = store.load_run(store.save_run(run)).trace
    thresholds_path(tiny).unlink()  # re-scoring reads the run's parameters, never the fit
    again = rescore_run(stored)
    assert again.first_divergence is None and again.flip_counts == {}
    judged = {(n.source, n.decision) for s in run.steps for n in s.nodes}
    assert {("context", "accepted"), ("alignment", "accepted"), ("alignment", "rejected")} <= judged
    from workbench.ui.replay_view import rerun_params, step_info
    from workbench.ui.shared import metrics_md

    assert "fitted thresholds: context α 0, β 0.03 · alignment α 0, β 0.3" in metrics_md(stored, 1, None)
    assert "alignment α 0, β 0.3" in step_info(1, stored, 0)
    again_params = rerun_params(stored, "aasd", [None, 0.05, 0.03, None, None])  # the sliders: δ α β τ λ
    assert again_params["fitted"] == 0 and again_params["alpha"] == 0.05 and again_params["beta_alignment"] == 0.3


# ---------------------------------------------------------------- the fit, end to end

def test_the_fit_chooses_stores_and_aasd_auto_uses_it(tiny, home, id_prompts):
    tasks = [Task(id=str(i), task="qa", input=f"abc abd abc abd {i} abc", answers=["t5 t7"], category="qa") for i in range(2)]
    grid = parse_grid("alpha=0;beta=0.05,0.5", "aasd")
    fit = fit_thresholds(tiny, tasks, "aasd", grid, max_new_tokens=8, progress=False)
    assert [t["stage"] for t in fit["trials"]] == ["shared"] * 2 + ["alignment"] * 2
    assert fit["chosen"]["shared"] in {"aasd[alpha=0,beta=0.05]", "aasd[alpha=0,beta=0.5]"}
    greedy = fit["greedy"]["alignment"]["score"]
    kept = [t for t in fit["trials"] if t["stage"] == "alignment" and t["score"] >= greedy]
    if kept:  # the chosen one is the fastest that kept greedy's score
        best = max(kept, key=lambda t: t["speedup"])
        assert fit["chosen"]["alignment"] == best["spec"] and fit["values"] == best["values"]
    else:
        assert fit["values"] == LOSSLESS["aasd"] and not fit["relaxed"]
    assert "| shared | greedy |" in format_fit(fit) and "←" in format_fit(fit)
    save_fit(tiny, "aasd", fit)
    run = run_method("aasd", tiny, [5, 6, 7, 8, 5, 6, 7], {"fitted": 1, "max_new_tokens": 6})
    assert {k: run.params[k] for k in fit["values"]} == fit["values"]


def test_the_command_fits_on_held_out_items_and_saves(tiny, home, id_prompts, tmp_path, monkeypatch, capsys):
    from workbench.commands import common
    from workbench.commands.main import main

    rows = [{"id": f"{c}{i}", "task": "qa", "input": f"abc abd {i} abc abd", "answers": ["t9"], "category": c}
            for c in ("x", "y") for i in range(3)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setattr(common, "load_models", lambda args: (tiny, None))
    argv = ["calibrate", "--thresholds", "--data", str(data), "--categories", "x,y", "--held-out-from", "2", "--limit", "1",
            "--grid", "alpha=0;beta=0.05,0.1", "--max-new-tokens", "6", "--shared-only"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "aasd[alpha=0,beta=0.05]" in out and ("aasd[auto] verifies with" in out or "no setting kept" in out)
    fit = json.loads(thresholds_path(tiny).read_text())["fits"]["aasd"]
    assert fit["items"]["ids"] == ["x/x2", "y/y2"] and fit["items"]["held_out_from"] == 2 and not fit["per_source"]
    assert main(argv[:-1] + ["--grid", "alpha=x"]) == 2  # bad grid: refused before any model loads
    assert main(["calibrate", "--thresholds", "--data", str(data), "--held-out-from", "3"]) == 2  # nothing held out

    # The fit recorded its items: evaluating aasd[auto] on them is not held out. bench warns (and says so in its
    # JSON); report, whose tables are the numbers, refuses; on other items neither complains.
    capsys.readouterr()
    out = tmp_path / "bench.json"
    bench = ["bench", "--data", str(data), "--methods", "aasd[auto]", "--max-new-tokens", "3", "--no-store"]
    assert main(bench + ["--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: fitted thresholds evaluated on the items they were fitted on" in err and "x/x2" in err and "y/y2" in err
    assert json.loads(out.read_text())["fit_overlap"] == {"aasd[auto]": ["x/x2", "y/y2"]}
    assert main(bench + ["--categories", "x", "--limit", "2", "--out", str(out)]) == 0  # x0, x1: held out
    assert "warning: fitted" not in capsys.readouterr().err and "fit_overlap" not in json.loads(out.read_text())
    report = ["report", "--data", str(data), "--methods", "aasd[auto]", "--max-new-tokens", "3", "--no-store",
              "--out", str(tmp_path / "report")]
    assert main(report) == 2
    err = capsys.readouterr().err
    assert "evaluated on the items they were fitted on: aasd[auto]: 2 items (x/x2, y/y2)" in err and "Traceback" not in err


# ---------------------------------------------------------------- the real model

@pytest.mark.real_model
def test_a_fit_on_smollm2_runs_and_aasd_auto_uses_it(smollm2, home, spec_bench):
    from workbench.evaluation.tasks import load_tasks

    # A short GSM8K item, and a fixed tree budget (max_nodes=auto would first measure t(n) in this empty home).
    tasks = held_out_tasks(load_tasks(spec_bench, categories=["math_reasoning"]), skip=40, per_category=1)
    fit = fit_thresholds(smollm2, tasks, "aasd", parse_grid("alpha=0.05;beta=0.03,0.1", "aasd"), params={"max_nodes": 16},
                         max_new_tokens=16, per_source=False, progress=False)
    assert len(fit["trials"]) == 2 and fit["greedy"]["shared"]["score"] is not None
    save_fit(smollm2, "aasd", fit)
    from core.models import encode_prompt

    run = run_method("aasd", smollm2, encode_prompt(smollm2.tokenizer, tasks[0].prompt()), {"fitted": 1, "max_new_tokens": 16, "max_nodes": 16})
    assert {k: run.params[k] for k in fit["values"]} == fit["values"] and len(run.output_ids) > 0
