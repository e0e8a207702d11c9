"""A reviewer's own task file as task families (`--tasks FILE` of bench_auto_size.py, check_shipped_fit.py and
`report --frontier`; workbench.evaluation.family_file): grouping, metrics, bad files, and the refusal of items a
fit or a held-out split has seen."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.errors import InvalidInputError
from workbench.evaluation.family_file import (
    Seen,
    check_run_unseen,
    check_unseen,
    contamination,
    fit_seen,
    held_out_seen,
    read_family_file,
)
from workbench.evaluation.tasks import Task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "assets" / "reviewer_tasks.jsonl"
PASSAGE = (
    "The tide clock in the old pilot house runs on a weight that the keeper winds every Sunday after the noon gun, "
    "and its hand points to high water rather than to the hour."
)


def write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def qa(id_, category="qa", context=PASSAGE, **extra):
    return {"id": id_, "task": "qa", "category": category, "context": context, "input": "When?", "answers": ["x"]} | (
        extra
    )


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- reading the file


def test_rows_group_into_families_in_file_order_each_scored_in_its_familys_metric(tmp_path):
    path = write(
        tmp_path / "mine.jsonl",
        [
            qa("a1", "lookup"),
            {"id": "s1", "task": "summarization", "category": "digest", "input": "Sum up.", "answers": ["y"]},
            qa("a2", "lookup", metric="rouge_l"),  # one row names the family's metric: the others take it
            {"id": "w1", "task": "chat", "category": "poems", "input": "Write a poem about rain."},
            {"id": "s2", "task": "summarization", "category": "digest", "input": "Sum up again.", "answers": ["z"]},
            qa("a3", "lookup"),
        ],
    )
    groups = read_family_file(path)
    assert list(groups) == ["lookup", "digest", "poems"]
    assert [t.id for t in groups["lookup"]] == ["a1", "a2", "a3"] and [t.id for t in groups["digest"]] == ["s1", "s2"]
    metrics = {f: {t.metric for t in g} for f, g in groups.items()}
    assert metrics == {"lookup": {"rouge_l"}, "digest": {"rouge_l"}, "poems": {"target_probability"}}
    assert all(t.category == f for f, g in groups.items() for t in g)
    # --families picks (in the order given), --first-item and --items slice each family
    picked = read_family_file(path, "digest,lookup", first=1, items=1)
    assert {f: [t.id for t in g] for f, g in picked.items()} == {"digest": ["s2"], "lookup": ["a2"]}
    # a qa family that names no metric is scored by token F1 (its kind's), an explicit metric wins over the kind's
    plain = read_family_file(write(tmp_path / "plain.jsonl", [qa("b1"), qa("b2", metric=None)]))
    assert {t.metric for t in plain["qa"]} == {"qa_f1"}


def test_a_family_is_scored_by_its_metric_not_by_its_name():
    from workbench.evaluation.families import family_score

    node = SimpleNamespace(parent=0, decision="accepted", depth=1, p=0.25)
    steps = [SimpleNamespace(nodes=[node], emitted=[5])]
    poem = Task("p", "chat", "Write.", category="poems", metric="target_probability")
    assert family_score(poem, "any text", steps) == pytest.approx(25.0)
    named_writing = Task("q", "qa", "Who?", answers=["Ada Lovelace"], category="writing", metric="qa_f1")
    assert family_score(named_writing, "Ada Lovelace", steps) == pytest.approx(100.0)  # F1, not the probability


BAD = {
    "not JSON": (["{not json"], "not valid JSON"),
    "a missing field": ([{"id": "1", "category": "qa", "input": "Who?", "answers": ["x"]}], "missing field(s) task"),
    "an unknown metric": ([qa("1", metric="bleu")], "unknown metric 'bleu'"),
    "no references": ([qa("1", answers=[])], "has no answers"),
    "two metrics in a family": ([qa("1"), qa("2", metric="rouge_l"), qa("3", metric="code_sim")], "mixes the metrics"),
    "a kind with no metric": ([{"id": "1", "task": "other", "input": "Hm?", "answers": ["x"]}], "names no metric"),
    "an id twice": ([qa("1"), qa("1")], "more than once"),
    "no rows": (["", "  "], "has no rows"),
    "code to execute": (
        [{"id": "1", "task": "code", "input": "def f():", "test": "assert f()", "entry_point": "f"}],
        "pass@1 (running the model's code), which --tasks does not run",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_are_one_line_errors(tmp_path, case):
    rows, words = BAD[case]
    with pytest.raises(InvalidInputError) as err:
        read_family_file(write(tmp_path / "bad.jsonl", rows))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_bad_choices_are_one_line_errors(tmp_path):
    path = write(tmp_path / "mine.jsonl", [qa("1"), qa("2", "lookup")])
    with pytest.raises(
        InvalidInputError, match=r"unknown task family nope in mine.jsonl \(its rows' categories\); known: qa, lookup"
    ):
        read_family_file(path, "qa,nope")
    with pytest.raises(InvalidInputError, match="family 'qa' of mine.jsonl has 1 row: --first-item 1 leaves none"):
        read_family_file(path, first=1)
    with pytest.raises(InvalidInputError, match="not found"):
        read_family_file(tmp_path / "absent.jsonl")


# ---------------------------------------------------------------- items already seen


def test_items_a_fit_saw_are_refused_by_id_and_by_text_and_near_duplicates_are_warned():
    other = "A completely different passage about kiln settings and glaze firings that share nothing at all here."
    tasks = [
        Task("a1", "qa", "When?", context=other, answers=["x"], category="qa"),  # the fit's id: refused
        Task("b", "qa", "When?", context=PASSAGE.upper().replace(",", ""), answers=["x"], category="qa"),  # same words
        Task("c", "qa", "When?", context="Preface. " + PASSAGE[:120] + " ... and more", answers=["x"], category="qa"),
        Task("d", "qa", "When?", context=other + " Fresh.", answers=["x"], category="qa"),
    ]
    fit = Seen("the home aasd fit", frozenset({"qa/a1"}), (PASSAGE,))
    found = contamination(tasks, [fit])
    assert found.seen == {"the home aasd fit": ["qa/a1", "qa/b"]}  # c shares a 13-gram only; d nothing
    assert found.near == {"the home aasd fit": ["qa/c"]}
    with pytest.raises(InvalidInputError) as err:
        check_unseen(tasks, [fit], "mine.jsonl")
    message = str(err.value)
    assert message.startswith("2 items of mine.jsonl were already seen (the home aasd fit: items qa/a1, qa/b)")
    assert "remove them from the file" in message and "\n" not in message
    lines = check_unseen(tasks[2:], [fit], "mine.jsonl")  # near-duplicates alone: a warning, not a refusal
    assert lines[0].startswith("checked 2 items of mine.jsonl against the home aasd fit (1): none seen")
    assert lines[1].startswith("warning: 1 item of mine.jsonl share a 13-word run") and "qa/c" in lines[1]
    assert check_unseen(tasks[3:], [fit], "mine.jsonl") == [
        "checked 1 item of mine.jsonl against the home aasd fit (1): none seen"
    ]


def test_a_fits_items_are_read_again_from_its_task_file_or_checked_by_id_when_it_is_gone(tmp_path):
    data = write(tmp_path / "fitted_on.jsonl", [qa("f1", "qa"), qa("f2", "qa", context="Another passage.")])
    fit = {"items": {"data": str(data), "ids": ["qa/f1"]}}
    seen, note = fit_seen(fit, "the home aasd fit")
    assert seen.ids == {"qa/f1"} and seen.texts == (PASSAGE,) and note is None  # only the items it used
    data.unlink()
    seen, note = fit_seen(fit, "the home aasd fit")
    assert seen.ids == {"qa/f1"} and seen.texts == () and "checked by their ids only" in note


def test_the_example_is_clean_and_a_copied_held_out_item_is_refused(tmp_path):
    from workbench.evaluation.families import family_tasks

    seen, _ = held_out_seen()
    sources = {s.source for s in seen}
    assert {"docqa's held-out split", "code's held-out split"} <= sources  # built here: always readable
    example = [t for g in read_family_file(EXAMPLE).values() for t in g]
    assert len(example) >= 4
    lines = check_unseen(example, seen, EXAMPLE.name)
    assert len(lines) == 1 and lines[0].endswith("none seen")  # no item seen, no near-duplicate
    held = family_tasks("code", "held_out", 2)[1]
    copied = Task("mine-1", "code", held.input, context=held.context, answers=held.answers, category="completion")
    with pytest.raises(InvalidInputError, match=r"1 item of x.jsonl was already seen \(code's held-out split: item "):
        check_unseen([*example, copied], seen, "x.jsonl")


def test_the_run_is_checked_against_the_fit_its_methods_read(tiny, tmp_path, monkeypatch):
    import workbench.evaluation.family_file as family_file
    from core.thresholds import save_fit

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(family_file, "held_out_seen", lambda: ([], []))  # this test is about the fit
    data = write(tmp_path / "fitted_on.jsonl", [qa("f1", "qa")])
    save_fit(tiny, "aasd", {"values": {"alpha": 0.1, "beta": 0.1}, "items": {"data": str(data), "ids": ["qa/f1"]}})
    mine = [Task("mine", "qa", "When?", context=PASSAGE, answers=["x"], category="lookup")]  # the fit's text
    with pytest.raises(InvalidInputError, match=r"already seen \(the home aasd fit \(.*\): item lookup/mine\)"):
        check_run_unseen(tiny, mine, ["aasd-strict", "aasd[auto]"], where="mine.jsonl")
    assert check_run_unseen(tiny, mine, ["aasd", "aasd-strict"], where="mine.jsonl") == [
        "checked 1 item of mine.jsonl against nothing: none seen"  # no method reads a fit (and no split here)
    ]


# ---------------------------------------------------------------- the three entry points


@pytest.mark.parametrize("name", ["check_shipped_fit", "bench_auto_size"])
def test_the_benchmarks_say_what_is_wrong_with_a_file_in_one_line_before_loading_a_model(
    name, tmp_path, capsys, monkeypatch
):
    import core.models

    monkeypatch.setattr(core.models, "load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    bad = write(tmp_path / "bad.jsonl", [qa("1", metric="bleu")])
    assert script(name).main(["--tasks", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bad.jsonl line 1: unknown metric 'bleu'; known: qa_f1")
    assert not (tmp_path / "out").exists()


def test_report_frontier_sweeps_a_reviewers_families_and_refuses_seen_items(tiny, tmp_path, monkeypatch, capsys):
    import workbench.evaluation.bench as bench
    from workbench.commands import common
    from workbench.commands.main import main
    from workbench.evaluation.families import family_tasks

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:60])
    monkeypatch.setattr(common, "load_models", lambda args: (tiny, None))
    out = tmp_path / "frontier"
    argv = ["report", "--frontier", "--tasks", str(EXAMPLE), "--families", "notice-qa,notice-summary", "--limit", "1"]
    argv += ["--rules", "casd", "--max-new-tokens", "4", "--max-nodes", "8", "--no-store", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads((out / "frontier.json").read_text())
    assert result["families"] == ["notice-qa", "notice-summary"] and result["config"]["tasks_file"] == str(EXAMPLE)
    assert {r["id"] for r in result["rows"]} == {"ferry-crossing", "allotment-water"}  # the first of each family
    assert all(set(p["families"]) == {"notice-qa", "notice-summary"} for p in result["points"])
    assert "| notice-qa Δ [95 % CI] | notice-summary Δ [95 % CI] |" in (out / "frontier.md").read_text()
    assert "none seen" in capsys.readouterr().err

    held = family_tasks("docqa", "held_out", 1)[0]
    row = {"id": "copy", "task": "qa", "category": "mine", "context": held.context, "input": held.input}
    seen_file = write(tmp_path / "seen.jsonl", [row | {"answers": held.answers}])
    argv[3], out2 = str(seen_file), tmp_path / "frontier2"
    argv[-1] = str(out2)
    argv[4:6] = []  # every family of the file
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: 1 item of seen.jsonl was already seen (docqa's held-out split: item mine/copy)" in err
    assert not (out2 / "frontier.json").exists()
    assert main(["report", "--tasks", str(EXAMPLE), "--out", str(out2)]) == 2  # the tables read --data
    assert "--tasks gives --frontier its items" in capsys.readouterr().err


@pytest.mark.real_model
def test_on_smollm2_check_shipped_fit_makes_a_row_per_family_with_an_interval(smollm2, tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    out = tmp_path / "check"
    argv = ["--tasks", str(EXAMPLE), "--families", "notice-qa,notice-summary", "--items", "1"]
    argv += ["--max-new-tokens", "8", "--threads", str(threads), "--out", str(out)]
    assert script("check_shipped_fit").main(argv) == 0
    assert torch.get_num_threads() == threads
    result = json.loads((out / "check.json").read_text())
    assert result["families"] == ["notice-qa", "notice-summary"]
    assert result["config"]["evaluation_items"] == {
        "notice-qa": ["ferry-crossing"],
        "notice-summary": ["allotment-water"],
    }
    assert result["config"]["metrics"] == {"notice-qa": "qa_f1", "notice-summary": "rouge_l"}
    scored = {(r["id"], r["method"]): r["score"] for r in result["rows"]}
    assert len(scored) == 6 and all(s is not None and 0 <= s <= 100 for s in scored.values())  # greedy + 2 methods
    for point in result["points"]:  # aasd[auto] and aasd-strict, each with an interval per family
        for family in ("notice-qa", "notice-summary"):
            i = point["families"][family]
            assert i["items"] == 1 and i["low"] <= i["mean"] <= i["high"]
    table = (out / "check.md").read_text().splitlines()
    assert table[0].startswith(
        "| rule | setting | speed-up | MAL | notice-qa Δ [95 % CI] | notice-summary Δ [95 % CI] |"
    )
    rows = [line for line in table if line.startswith(("| shipped fit |", "| strict |"))]
    assert len(rows) == 2 and all(line.count(" [") == 2 for line in rows)
    err = capsys.readouterr().err
    assert "checked 2 items of reviewer_tasks.jsonl against the shipped aasd fit" in err and "none seen" in err


@pytest.mark.real_model
@pytest.mark.parametrize("name", ["check_shipped_fit", "bench_auto_size"])
def test_on_smollm2_the_benchmarks_refuse_a_seen_item_before_decoding(name, smollm2, tmp_path, capsys, monkeypatch):
    import torch

    import workbench.methods
    from workbench.evaluation.families import family_tasks

    monkeypatch.setattr(workbench.methods, "run_method", lambda *a, **k: pytest.fail("decoded before the check"))
    held = family_tasks("code", "held_out", 1)[0]
    row = {"id": "copy", "task": "code", "category": "completion", "context": held.context, "input": held.input}
    seen_file = write(tmp_path / "seen.jsonl", [qa("fresh", "lookup"), row | {"answers": held.answers}])
    argv = ["--tasks", str(seen_file), "--threads", str(torch.get_num_threads()), "--out", str(tmp_path / "out")]
    assert script(name).main(argv) == 2
    out = capsys.readouterr().err
    assert "Traceback" not in out
    (err,) = [line for line in out.splitlines() if line.startswith("error:")]
    assert err.startswith("error: 1 item of seen.jsonl was already seen (")
    # the shipped fit was made on code's first held-out items; aasd[auto] reads it, the gate's default methods do not
    fit = "the shipped aasd fit (af044ae7da4137f3-float32.json): item completion/copy; "
    assert (fit + "code's held-out split: item completion/copy)" in err) == (name == "check_shipped_fit")
    assert "code's held-out split: item completion/copy): " in err and "remove them from the file" in err
