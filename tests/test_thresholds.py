"""Thresholds fitted to the model (`calibrate --thresholds`, `aasd[auto]`): choosing a setting from a grid's
results, the stored fit, the method spec, the rules a stored run is rebuilt with, and the fit end to end."""

from __future__ import annotations

import json
import random

import pytest

from core.errors import InvalidInputError
from core.methods import get_method, parse_method_spec, resolve_params, run_method
from core.rules import NodeStats, rule_for
from core.thresholds import FITTED_PARAMS, LOSSLESS, describe_values, fitted_values, save_fit, thresholds_path
from workbench.evaluation.admissibility import fastest
from workbench.evaluation.tasks import Task
from workbench.evaluation.thresholds import (
    Trial,
    fit_thresholds,
    format_fit,
    grid_settings,
    held_out_tasks,
    items_record,
    method_spec,
    outcomes_by_family,
    parse_grid,
    trial_of,
)

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


def trial(speedup, mal, admissible, spec="s"):
    return Trial("shared", {}, spec, speedup, mal, admissible)


# ---------------------------------------------------------------- choosing (pure)


def test_the_fastest_admissible_setting_is_chosen_by_mal_or_by_the_measured_speedup():
    trials = [
        trial(1.9, 2.5, False, "fast-but-inadmissible"),
        trial(1.3, 2.0, True, "mal-best"),
        trial(1.4, 1.8, True, "speed-best"),
        trial(None, 3.0, True, "untimed"),
        trial(2.0, None, True, "uncounted"),
    ]
    assert fastest(trials[:3], "mal").spec == "mal-best" and fastest(trials[:3], "speedup").spec == "speed-best"
    assert (
        fastest(trials, "mal").spec == "untimed" and fastest(trials, "speedup").spec == "uncounted"
    )  # None is skipped
    assert fastest([trial(1.2, 2, True, "a"), trial(1.2, 2, True, "b")], "mal").spec == "a"  # a tie keeps the earlier
    assert fastest([trial(1.5, 3, False), trial(1.1, 2, False)], "mal") is None and fastest([], "mal") is None
    with pytest.raises(InvalidInputError, match="mal or speedup"):
        fastest(trials, "tps")


def row(family, item, method, score, tokens=10, seconds=1.0, steps=5):
    return {
        "category": family,
        "id": item,
        "method": method,
        "score": score,
        "tokens": tokens,
        "decode_seconds": seconds,
        "decoded": tokens,
        "steps": steps,
    }


def test_outcomes_pair_each_item_with_greedys_within_its_family_and_the_rule_judges_every_family():
    # Two families share an id: pairing is by (family, id). qa loses 30 points on both items: inadmissible.
    rows = [
        row("qa", "1", "greedy", 60),
        row("qa", "1", "s", 30, seconds=0.5, steps=2),
        row("qa", "2", "greedy", 50),
        row("qa", "2", "s", 20, seconds=0.5, steps=2),
        row("summ", "1", "greedy", 40),
        row("summ", "1", "s", 41, seconds=0.5, steps=2),
        row("summ", "2", "greedy", None),
        row("summ", "2", "s", 45, seconds=0.5, steps=2),
    ]  # unscored: not paired
    by = {o.family: o for o in outcomes_by_family(rows, "s")}
    assert by["qa"].setting_scores == [30, 20] and by["qa"].greedy_scores == [60, 50]
    assert by["summ"].setting_scores == [41] and by["summ"].greedy_tokens == 20 and by["summ"].setting_steps == 4
    t = trial_of("shared", "s", {"beta": 0.1}, list(by.values()), ["qa", "summ"])
    assert (
        not t.admissible
        and t.failing == ("qa",)
        and t.families["qa"]["mean"] == -30
        and t.families["summ"]["items"] == 1
    )
    assert t.speedup == pytest.approx(2.0) and t.mal == pytest.approx(40 / 8)
    rows[1]["score"], rows[3]["score"] = 60, 50  # qa now equal to greedy: admissible
    assert trial_of("shared", "s", {}, outcomes_by_family(rows, "s"), ["qa", "summ"]).admissible
    with pytest.raises(InvalidInputError, match="not measured on family code"):
        trial_of("shared", "s", {}, outcomes_by_family(rows, "s"), ["qa", "summ", "code"])


def test_a_fit_records_its_item_ids_per_family():
    tasks = [
        Task(id=f"{i}", task="qa", input="x", answers=["y"], category=c) for c in ("docqa", "rag") for i in range(2)
    ]
    rec = items_record(tasks, {"split": "held_out", "per_family": 2})
    assert rec["families"] == {"docqa": ["0", "1"], "rag": ["0", "1"]} and rec["count"] == 4
    assert rec["ids"] == ["docqa/0", "docqa/1", "rag/0", "rag/1"] and rec["split"] == "held_out"


def test_grids_parse_with_defaults_and_refuse_bad_input():
    grid = parse_grid("alpha=0,0.05,0.05", "aasd")
    assert grid == {"alpha": (0.0, 0.05), "beta": (0.01, 0.03, 0.1)}  # beta keeps the default grid
    assert len(grid_settings(parse_grid(None, "aasd"))) == 12 and len(grid_settings(parse_grid(None, "casd"))) == 4
    assert method_spec("aasd", {"alpha": 0.05, "beta": 0.01}) == "aasd[alpha=0.05,beta=0.01]"
    for bad, match in [
        ("gamma=1", "NAME"),
        ("alpha", "NAME"),
        ("alpha=x", "numbers"),
        ("alpha=", "no values"),
        ("beta=2", "out of range"),
        ("delta=0.1", "NAME"),
    ]:
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
    with pytest.raises(InvalidInputError, match="no item of chat has a task score"):  # before any model work
        fit_thresholds(
            None,
            [
                Task(id="1", task="chat", input="x", category="chat"),
                Task(id="2", task="qa", input="x", answers=["y"], category="qa"),
            ],
        )


# ---------------------------------------------------------------- the stored fit and aasd[auto]


def test_a_fit_round_trips_beside_the_timing_curve(tiny, home):
    path = save_fit(tiny, "aasd", {"values": FIT, "relaxed": True})
    save_fit(tiny, "casd", {"values": {"delta": 0.2}, "relaxed": True})
    assert path == home / "thresholds" / "tiny-cpu-float32.json" == thresholds_path(tiny)
    stored = json.loads(path.read_text())
    assert (
        stored["fingerprint"] == "tiny" and set(stored["fits"]) == {"aasd", "casd"} and stored["fits"]["aasd"]["fitted"]
    )
    assert fitted_values(tiny, "aasd") == FIT and fitted_values(tiny, "casd") == {"delta": 0.2}
    assert describe_values(FIT) == "context α 0, β 0.03 · alignment α 0, β 0.3"
    assert describe_values({"delta": 0.2}) == "δ 0.2"


def test_a_missing_fit_says_which_command_makes_it(tiny, home):
    with pytest.raises(
        InvalidInputError, match="calibrate --thresholds --model tiny-llama --device cpu --dtype float32"
    ):
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
    plain = get_method("aasd").rules_of(
        resolve_params("aasd", {"alpha": 0, "beta": 0.03})
    )  # unset: alignment = context
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


def test_the_fit_judges_every_family_stores_and_aasd_auto_uses_it(tiny, home, id_prompts):
    tasks = [
        Task(id=str(i), task="qa", input=f"abc abd abc abd {i} abc", answers=["t5 t7"], category=c)
        for c in ("fa", "fb")
        for i in range(2)
    ]
    grid = parse_grid("alpha=0;beta=0.05,0.5", "aasd")
    fit = fit_thresholds(tiny, tasks, "aasd", grid, max_new_tokens=8, progress=False)
    assert [t["stage"] for t in fit["trials"]] == ["shared"] * 2 + ["alignment"] * 2 and fit["by"] == "mal"
    assert fit["families"] == ["fa", "fb"]
    for t in fit["trials"]:  # every setting judged on every family, admissible iff no lower bound below −1
        assert set(t["families"]) == {"fa", "fb"} and all(i["items"] == 2 for i in t["families"].values())
        assert t["admissible"] == all(i["low"] >= -1 for i in t["families"].values())
    kept = [t for t in fit["trials"] if t["stage"] == "alignment" and t["admissible"]]
    if kept:  # the chosen one is the admissible one with the largest MAL
        best = max(kept, key=lambda t: t["mal"])
        assert fit["chosen"]["alignment"] == best["spec"] and fit["values"] == best["values"]
    else:
        assert fit["values"] == LOSSLESS["aasd"] and not fit["relaxed"]
    assert "| shared | greedy |" in format_fit(fit) and "fa Δ [95 % CI]" in format_fit(fit)
    save_fit(tiny, "aasd", fit)
    run = run_method("aasd", tiny, [5, 6, 7, 8, 5, 6, 7], {"fitted": 1, "max_new_tokens": 6})
    assert {k: run.params[k] for k in fit["values"]} == fit["values"]


def test_the_command_fits_on_held_out_items_and_saves(tiny, home, id_prompts, tmp_path, monkeypatch, capsys):
    from workbench.commands import common
    from workbench.commands.main import main

    rows = [
        {"id": f"{c}{i}", "task": "qa", "input": f"abc abd {i} abc abd", "answers": ["t9"], "category": c}
        for c in ("x", "y")
        for i in range(3)
    ]
    data = tmp_path / "tasks.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setattr(common, "load_models", lambda args: (tiny, None))
    argv = [
        "calibrate",
        "--thresholds",
        "--data",
        str(data),
        "--categories",
        "x,y",
        "--held-out-from",
        "2",
        "--limit",
        "1",
        "--grid",
        "alpha=0;beta=0.05,0.1",
        "--max-new-tokens",
        "6",
        "--shared-only",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "aasd[alpha=0,beta=0.05]" in out and ("aasd[auto] verifies with" in out or "no setting held" in out)
    fit = json.loads(thresholds_path(tiny).read_text())["fits"]["aasd"]
    assert fit["items"]["ids"] == ["x/x2", "y/y2"] and fit["items"]["held_out_from"] == 2 and not fit["per_source"]
    assert fit["items"]["families"] == {"x": ["x2"], "y": ["y2"]} and fit["command"].startswith(
        "python -m workbench calibrate"
    )
    assert main(argv[:-1] + ["--grid", "alpha=x"]) == 2  # bad grid: refused before any model loads
    assert main(["calibrate", "--thresholds", "--data", str(data), "--held-out-from", "3"]) == 2  # nothing held out

    # The fit recorded its items: evaluating aasd[auto] on them is not held out. bench warns (and says so in its
    # JSON); report, whose tables are the numbers, refuses; on other items neither complains.
    capsys.readouterr()
    out = tmp_path / "bench.json"
    bench = ["bench", "--data", str(data), "--methods", "aasd[auto]", "--max-new-tokens", "3", "--no-store"]
    assert main(bench + ["--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert (
        "warning: fitted thresholds evaluated on the items they were fitted on" in err
        and "x/x2" in err
        and "y/y2" in err
    )
    assert json.loads(out.read_text())["fit_overlap"] == {"aasd[auto]": ["x/x2", "y/y2"]}
    assert main(bench + ["--categories", "x", "--limit", "2", "--out", str(out)]) == 0  # x0, x1: held out
    assert "warning: fitted" not in capsys.readouterr().err and "fit_overlap" not in json.loads(out.read_text())
    report = [
        "report",
        "--data",
        str(data),
        "--methods",
        "aasd[auto]",
        "--max-new-tokens",
        "3",
        "--no-store",
        "--out",
        str(tmp_path / "report"),
    ]
    assert main(report) == 2
    err = capsys.readouterr().err
    assert (
        "evaluated on the items they were fitted on: aasd[auto]: 2 items (x/x2, y/y2)" in err and "Traceback" not in err
    )


# ---------------------------------------------------------------- the real model


@pytest.mark.real_model
@pytest.mark.slow
def test_a_fit_across_families_on_smollm2_runs_and_aasd_auto_uses_it(smollm2, home, spec_bench):
    from workbench.evaluation.families import load_families

    # One short held-out item of two families, and a fixed tree budget (max_nodes=auto would first measure t(n, L)).
    tasks = [t for group in load_families(["gsm8k", "rag"], "held_out", 1).values() for t in group]
    fit = fit_thresholds(
        smollm2,
        tasks,
        "aasd",
        parse_grid("alpha=0.05;beta=0.03,0.1", "aasd"),
        params={"max_nodes": 16},
        max_new_tokens=16,
        per_source=False,
        progress=False,
    )
    assert len(fit["trials"]) == 2 and fit["families"] == ["gsm8k", "rag"]
    assert all(set(t["families"]) == {"gsm8k", "rag"} and t["mal"] >= 1 for t in fit["trials"])
    save_fit(smollm2, "aasd", {**fit, "items": items_record(tasks, {"split": "held_out"})})
    from core.models import encode_prompt

    run = run_method(
        "aasd",
        smollm2,
        encode_prompt(smollm2.tokenizer, tasks[0].prompt()),
        {"fitted": 1, "max_new_tokens": 16, "max_nodes": 16},
    )
    assert {k: run.params[k] for k in fit["values"]} == fit["values"] and len(run.output_ids) > 0


def test_the_fit_runs_across_families_can_be_shipped_and_bench_checks_the_shipped_ids(
    tiny, home, id_prompts, tmp_path, monkeypatch, capsys, spec_bench
):
    import core.thresholds as thresholds
    from workbench.commands import common
    from workbench.commands.main import main

    monkeypatch.setattr(common, "load_models", lambda args: (tiny, None))
    monkeypatch.setattr(thresholds, "SHIPPED_DIR", tmp_path / "fits")
    argv = [
        "calibrate",
        "--thresholds",
        "--families",
        "summarization,rag",
        "--limit",
        "1",
        "--grid",
        "alpha=0;beta=0.05",
        "--max-new-tokens",
        "3",
        "--shared-only",
        "--ship",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "summarization Δ [95 % CI]" in out and "rag Δ [95 % CI]" in out
    assert not thresholds_path(tiny).exists()  # shipped, not the user's
    shipped = thresholds.shipped_fits_path(tiny)
    fit = json.loads(shipped.read_text())["fits"]["aasd"]
    from workbench.evaluation.tasks import load_tasks

    held = {
        f: [t.id for t in held_out_tasks(load_tasks(spec_bench, categories=[f]), 40, 1)]
        for f in ("summarization", "rag")
    }
    assert fit["items"]["families"] == held and fit["items"]["split"] == "held_out"
    import hashlib

    sha = shipped.with_name(shipped.name + ".sha256").read_text()
    assert sha.split()[0] == hashlib.sha256(shipped.read_bytes()).hexdigest() and "--families summarization,rag" in sha
    assert thresholds.stored_fit(tiny, "aasd")[1] == "shipped" and fitted_values(tiny, "aasd") == fit["values"]
    save_fit(tiny, "aasd", {"values": FIT, "relaxed": True})  # the user's own fit comes first
    assert thresholds.stored_fit(tiny, "aasd")[1] == "home" and fitted_values(tiny, "aasd") == FIT
    thresholds_path(tiny).unlink()

    # The benchmark items (the first 40) are held out from the shipped fit; the 41st of summarization is its item.
    from workbench.evaluation.thresholds import fit_overlap

    items = load_tasks(spec_bench, categories=["summarization"])[:41]
    assert fit_overlap(tiny, ["aasd[auto]"], None, items[:40]) == {}
    assert fit_overlap(tiny, ["aasd[auto]", "aasd"], None, items) == {
        "aasd[auto]": [f"summarization/{held['summarization'][0]}"]
    }
    assert fit_overlap(tiny, ["casd[auto]"], None, items) == {}  # no casd fit: nothing to overlap


def test_a_shipped_fit_of_another_dtype_serves_and_names_its_dtype(tiny, home, tmp_path, monkeypatch):
    import core.thresholds as thresholds

    monkeypatch.setattr(thresholds, "SHIPPED_DIR", tmp_path / "fits")
    assert thresholds.stored_fit(tiny, "aasd") == (None, "none") and thresholds.shipped_fit_models("aasd") == set()
    (tmp_path / "fits").mkdir()
    write = lambda dtype, values: (tmp_path / "fits" / f"tiny-{dtype}.json").write_text(  # noqa: E731
        json.dumps({"model": "tiny-llama", "fits": {"aasd": {"values": values}}})
    )
    write("bfloat16", FIT)
    assert thresholds.stored_fit(tiny, "aasd")[1] == "shipped (bfloat16)" and fitted_values(tiny, "aasd") == FIT
    assert thresholds.shipped_fit_models("aasd") == {"tiny-llama"} and thresholds.shipped_fit_models("casd") == set()
    own = dict(FIT, beta=0.2)
    write("float32", own)  # the running dtype's own comes first
    assert thresholds.stored_fit(tiny, "aasd")[1] == "shipped" and fitted_values(tiny, "aasd") == own


def test_the_shipped_fits_match_their_hashes_and_were_made_on_held_out_items_only(home):
    """Every file in core/fits: its .sha256 holds its hash and the command that made it, and no item it was fitted
    on is in its family's evaluation split (what reports show)."""
    import hashlib

    from core.thresholds import SHIPPED_DIR
    from workbench.evaluation.families import FAMILIES, family_tasks

    files = sorted(SHIPPED_DIR.glob("*.json"))
    assert files, "no shipped fit in core/fits"
    for path in files:
        sha = path.with_name(path.name + ".sha256").read_text().splitlines()
        assert sha[0].split() == [hashlib.sha256(path.read_bytes()).hexdigest(), path.name]
        data = json.loads(path.read_text())
        for method, fit in data["fits"].items():
            assert any(
                line.startswith(f"# {method} rebuild: python -m workbench calibrate --thresholds") for line in sha
            )
            assert set(fit["values"]) == set(FITTED_PARAMS[method]) and fit["items"]["split"] == "held_out"
            for family, ids in fit["items"]["families"].items():
                assert family in FAMILIES and ids
                assert not set(ids) & {t.id for t in family_tasks(family, "evaluation")}, (path.name, family)


@pytest.mark.real_model
def test_aasd_auto_works_out_of_the_box_on_smollm2_with_the_shipped_fit(smollm2, home):
    from core.models import encode_prompt
    from core.thresholds import stored_fit

    fit, where = stored_fit(smollm2, "aasd")
    assert where == "shipped" and not thresholds_path(smollm2).exists()  # an empty home: the package's fit
    ids = encode_prompt(smollm2.tokenizer, "Repeat exactly: the cat sat on the mat. The cat sat on the mat.")
    run = run_method("aasd", smollm2, ids, {"fitted": 1, "max_new_tokens": 12, "max_nodes": 8})
    assert {k: run.params[k] for k in fit["values"]} == fit["values"] and run.output_ids
