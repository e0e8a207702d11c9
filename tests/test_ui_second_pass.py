"""Issue 33, the second newcomer pass: the pure functions behind its fixes (the browser tests are in
tests/test_browser_second_pass.py)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from core.params import MEMORY_MODES, SHIPPED_MEMORY

# ---------------------------------------------------------------- item 1: a reproducible default csd


def test_the_apps_csd_reads_the_shipped_memory_unless_online_is_asked_for():
    from workbench.ui.compare_tab import app_memory_mode, column_notes

    assert app_memory_mode("csd", {}) == SHIPPED_MEMORY
    assert app_memory_mode("csd", {"memory_mode": "online"}) == MEMORY_MODES["online"]
    assert app_memory_mode("csd", {"memory_mode": "frozen"}) == MEMORY_MODES["frozen"]
    assert "shipped table, read only" in column_notes("csd", "")
    assert "every rejection adds to it" in column_notes("csd[memory_mode=online]", "")
    assert "memory" not in column_notes("aasd", "")


def test_a_run_on_a_grown_memory_says_by_how_much_and_how_to_reset():
    from workbench.ui.compare_tab import memory_note

    grown = {"memory_mode": 0, "memory_sha": "b" * 16, "memory_observations": 10_250}
    note = memory_note(grown, 10_000, "a" * 16, "e945.json")
    assert "250 observations added since the shipped table" in note and "memory/e945.json" in note
    assert "reset" in note
    assert memory_note({**grown, "memory_mode": SHIPPED_MEMORY}, 10_000, "a" * 16, "e945.json") == ""
    empty = memory_note({**grown, "memory_mode": SHIPPED_MEMORY}, 0, "a" * 16, "e945.json")  # none shipped
    assert "no table is shipped for this model pair" in empty and "λ = 0" in empty
    assert "nothing added" in memory_note({**grown, "memory_sha": "a" * 16}, 10_000, "a" * 16, "e945.json")
    assert memory_note({"tau": 0.1}, 10_000, "a" * 16, "e945.json") == ""  # a run that read no memory


def test_memory_mode_shipped_reads_the_packaged_table_not_the_grown_one(tmp_path, monkeypatch):
    """The shipped mode is what makes the default repeat: counts online runs added to the shared table are not seen."""
    from types import SimpleNamespace

    import core.memory
    from core.memory import pair_fingerprint, shared_memory, shipped_memory, shipped_memory_path
    from core.methods import correction_memory, get_method

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(core.memory, "_SHARED", {})  # this test's tables only: nothing saved at exit
    target = SimpleNamespace(name="t", fingerprint="nofp-" + tmp_path.name)
    csd = get_method("csd")
    shared = correction_memory(csd, target, None, None, {"memory_mode": 0})
    assert shared is shared_memory(target)
    shared.observe(5, 7)
    shipped = correction_memory(csd, target, None, None, {"memory_mode": SHIPPED_MEMORY})
    assert shipped is shipped_memory(target) and shipped.count(5, 7) == 0 and shipped.path is None
    assert shipped_memory_path(pair_fingerprint(target.fingerprint, None)) is None and len(shipped) == 0


# ---------------------------------------------------------------- item 2: the Diff tab starts on the last comparison


def test_the_diff_pickers_take_the_last_comparisons_first_two_runs():
    from workbench.ui.diff_tab import last_pair, picks_for

    assert last_pair([7, 8, 9]) == (7, 8) and last_pair([7]) is None and last_pair(None) is None
    a, b = picks_for([("#7", 7), ("#8", 8)], [7, 8, 9])
    assert (a["value"], b["value"]) == (7, 8)
    a, b = picks_for([("#7", 7)], [7, 8, 9], 3, 4)  # the user's own choice stays on reopening the tab
    assert "value" not in a and "value" not in b and a["choices"] == [("#7", 7)]
    a, b = picks_for([("#7", 7)], [10, 11], 3, 4, follow=True)  # a new comparison: follow it
    assert (a["value"], b["value"]) == (10, 11)


# ---------------------------------------------------------------- items 4, 5: tokens shown visibly, reasons by text


def test_a_tokens_whitespace_is_visible_in_every_view():
    import pandas as pd

    from core.token_text import visible_token
    from core.trace import NodeTrace, StepTrace
    from workbench.ui.replay_view import nodes_frame
    from workbench.ui.tokens import show_token

    assert visible_token("\n") == "↵" and visible_token("\t") == "⇥" and visible_token("  x") == "␣␣x"
    assert visible_token("") == "∅" and show_token("\n\n") == "↵↵"  # the figures' labels: the same signs
    root = NodeTrace(0, 3, 0, -1, 0, 5, "x", "root", "accepted", "root")
    node = NodeTrace(0, 3, 1, 0, 1, 198, "\n", "context", "accepted", "p ≥ δ", p=0.9)
    frame = nodes_frame(StepTrace(0, 3, 1, 1, [198], nodes=[root, node]))
    assert isinstance(frame, pd.DataFrame) and list(frame["token"]) == ["x", "↵"]
    from browser_util import synthetic_run

    from workbench.ui.diff_tab import diff_outputs

    a, b = synthetic_run("greedy", output_ids=[1, 2]), synthetic_run("pld", output_ids=[1, 3])
    summary, _ = diff_outputs(1, a, [("x", "model"), ("\n", "model")], 2, b, [("x", "model"), ("\t", "model")])
    assert "`'↵'` (id 2)" in summary and "`'⇥'` (id 3)" in summary, summary  # the diff's summary: the same signs


def test_a_reason_names_its_correction_by_text_in_the_cli_and_the_csv(tmp_path, capsys):
    import csv

    from browser_util import synthetic_run

    from core.token_text import spoken_reason
    from core.trace import NodeTrace, StepTrace
    from workbench.commands.main import main
    from workbench.store import Store

    assert spoken_reason("gap ok; correction 504", {504: " the"}.get) == "gap ok; correction '␣the'"
    nodes = [
        NodeTrace(0, 3, 0, -1, 0, 5, "x", "root", "accepted", "root"),
        NodeTrace(0, 3, 1, 0, 1, 7, " a", "context", "rescued", "count 6 ≥ λ 6; correction 504", correction_id=504),
        NodeTrace(0, 3, 2, 0, 1, 504, " the", "context", "bonus", "own"),
    ]
    run = synthetic_run("csd", [StepTrace(0, 3, 2, 1, [7, 504], nodes=nodes)])
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    rid = Store(url).save_run(run)
    capsys.readouterr()
    assert main(["store", "show", str(rid), "--step", "0", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "correction '␣the'" in out and "correction 504" not in out
    assert main(["store", "export", "--run", str(rid), "--out", str(tmp_path / "csv"), "--db", url]) == 0
    rows = list(csv.DictReader((tmp_path / "csv" / "nodes.csv").open(encoding="utf-8")))
    rescued = next(r for r in rows if r["decision"] == "rescued")
    assert rescued["reason_text"] == "count 6 ≥ λ 6; correction '␣the'"
    assert rescued["correction_id"] == "504" and rescued["reason"].endswith("correction 504")  # for machines
    copy = Store(f"sqlite:///{tmp_path / 'copy.sqlite'}")
    assert copy.import_csv(tmp_path / "csv") == [rid]
    assert copy.load_run(rid).trace.steps[0].nodes[1].reason == "count 6 ≥ λ 6; correction 504"
    # an export made before reason_text existed still imports
    with (tmp_path / "csv" / "nodes.csv").open(encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    drop = table[0].index("reason_text")
    with (tmp_path / "csv" / "nodes.csv").open("w", encoding="utf-8", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([r[:drop] + r[drop + 1 :] for r in table])
    older = Store(f"sqlite:///{tmp_path / 'older.sqlite'}")
    assert older.import_csv(tmp_path / "csv") == [rid] and older.load_run(rid).trace == copy.load_run(rid).trace


# ---------------------------------------------------------------- item 6: analytics names runs as they were asked


def test_analytics_legends_name_a_fitted_run_aasd_auto(tmp_path):
    from browser_util import synthetic_run

    from core.trace import NodeTrace, StepTrace
    from workbench.store import Store
    from workbench.ui.analytics_tab import figures_of, labelled_traces
    from workbench.ui.figures.common import run_label
    from workbench.ui.shared import RunCache

    nodes = [
        NodeTrace(0, 3, 0, -1, 0, 5, "x", "root", "accepted", "root"),
        NodeTrace(0, 3, 1, 0, 1, 7, " a", "context", "accepted", "p ≥ θ", p=0.9),
        NodeTrace(0, 3, 2, 1, 2, 8, " b", "model", "bonus", "own"),
    ]
    fitted = synthetic_run("aasd", [StepTrace(0, 3, 1, 1, [7, 8], nodes=nodes)], params={"fitted": 1, "alpha": 0.2})
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    rid = store.save_run(fitted)
    other = store.save_run(replace(fitted, params={"fitted": 1, "alpha": 0.3}))  # two values: the sweep has a line
    pairs = labelled_traces(RunCache(store), [rid, other], [])
    assert [label for label, _ in pairs] == [f"#{rid} aasd[auto]", f"#{other} aasd[auto]"]
    assert run_label({"id": rid, "trace": fitted}) == f"#{rid} aasd[auto]" and run_label(fitted) == "aasd[auto]"
    names = {t.name for fig in figures_of(pairs, "alpha") for t in fig.data if t.name} - {"mal", "tps"}
    assert "aasd[auto]" in names and not any(re.search(r"aasd(?!\[auto\])", n) for n in names), names


# ---------------------------------------------------------------- item 7: an unknown run id in single-user mode


def test_an_unknown_run_id_speaks_of_sessions_only_where_there_are_sessions(tmp_path):
    import pytest

    from workbench.store import RunNotFoundError, Store
    from workbench.ui.access import Viewer, owner_tag
    from workbench.ui.shared import RunCache

    cache = RunCache(Store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    with pytest.raises(RunNotFoundError) as single:
        cache.get(999, Viewer(None))  # single-user mode: every run is everyone's
    assert "session" not in str(single.value) and "no run 999 in this app's store" in str(single.value)
    with pytest.raises(RunNotFoundError) as multi:
        cache.get(999, Viewer(owner_tag("s")))
    assert "among this session's runs and the shared ones" in str(multi.value)


# ---------------------------------------------------------------- the compare handler's parameters: one list


def test_the_compare_handlers_parameters_are_the_forms_inputs_in_order():
    """CompareHandlers.compare reads the parameter fields by name (PARAM_FIELDS): its signature, which names the API's
    parameters, must list them where CompareForm.inputs puts the fields."""
    import inspect

    from workbench.ui.compare_tab import PARAM_FIELDS, CompareHandlers

    names = list(inspect.signature(CompareHandlers.compare).parameters)[2:]  # after self, request
    assert names[7 : 7 + len(PARAM_FIELDS)] == list(PARAM_FIELDS)
    assert names[:7] == [
        "model_name",
        "draft_name",
        "method_list",
        "prompt_text",
        "context_text",
        "use_chat",
        "max_new_tokens",
    ]


def test_the_diff_names_a_fitted_run_as_it_was_asked():
    # third newcomer pass: the Diff heading said "#90 aasd" where the runs list says "aasd[auto]"
    from browser_util import synthetic_run

    from workbench.ui.diff_tab import diff_outputs

    greedy = synthetic_run("greedy", output_ids=[1, 2])
    fitted = replace(synthetic_run("aasd", output_ids=[1, 3]), params={"fitted": 1})
    summary, _ = diff_outputs(1, greedy, [("x", "model")] * 2, 2, fitted, [("x", "model")] * 2)
    assert "#2 aasd[auto]" in summary and "#1 greedy" in summary, summary


def test_a_field_greyed_by_a_fit_says_why_and_how_to_set_it():
    # third newcomer pass: α and β were greyed for aasd[auto] with no reason beside them
    from workbench.ui.compare_tab import field_info, params_taken

    greyed = field_info("alpha", ["greedy", "aasd[auto]", "csd"])
    assert "alpha" not in params_taken(["greedy", "aasd[auto]", "csd"])
    assert "Greyed: aasd[auto] reads it from its fit" in greyed and "`aasd`" in greyed, greyed
    assert "Greyed" not in field_info("alpha", ["greedy", "aasd"])  # aasd reads the field: nothing to explain
    assert "Greyed" not in field_info("alpha", ["aasd[auto]", "aasd"])  # one method reads it: the field is live
    assert "Greyed" not in field_info("lam", ["greedy", "pld"])  # unused, but not because of a fit


def test_a_divergence_note_tells_a_near_tie_from_the_methods_rule():
    # third newcomer pass: aasd[auto] and csd left greedy at a bfloat16 near-tie (both tokens the model's own top
    # choice in their forward) and the column let it read as the method's gain
    from workbench.ui.tokens import divergence_note

    tie = {"position": 8, "greedy_token": 25, "token": 327, "gap": 0.06, "dtype": "bfloat16", "near_tie": True}
    far = dict(tie, gap=4.2, near_tie=False)
    decode = {25: ":", 327: " for"}.get
    note = divergence_note(tie, lossless=False, decode=lambda ids: decode(ids[0]))
    assert "token 8" in note and "`:`" in note and "`␣for`" in note and "near-tie" in note and "rounding" in note
    assert "near-tie" not in divergence_note(far, lossless=False) and "rule" in divergence_note(far, lossless=False)
    assert "should not" in divergence_note(far, lossless=True)
    assert divergence_note(None, lossless=False) == ""


@pytest.mark.real_model
def test_a_columns_divergence_is_measured_on_smollm2(smollm2):
    """On the real model: a run that took the model's second choice at a near-tie is said to be a near-tie, one that
    took a token far down is said to be the rule's."""
    import torch

    from core.models import encode_prompt
    from workbench.evaluation.fidelity import NEAR_TIE, flip_report
    from workbench.ui.tokens import divergence_note

    tok = smollm2.tokenizer
    prompt = encode_prompt(tok, "List three colours of the rainbow.", chat=True)
    greedy = []
    with torch.inference_mode():
        for _ in range(24):
            logits = smollm2.model(input_ids=torch.tensor([prompt + greedy])).logits[0, -1]
            greedy.append(int(logits.argmax()))
            ranked = logits.topk(2)
            if len(greedy) > 2 and float(ranked.values[0] - ranked.values[1]) < 1.0:
                break  # a position where the model's first two choices are close
    j = len(greedy) - 1
    second, last = int(ranked.indices[1]), int(logits.argmin())
    near = flip_report(smollm2, prompt, greedy, greedy[:j] + [second])
    far = flip_report(smollm2, prompt, greedy, greedy[:j] + [last])
    assert near["position"] == far["position"] == j and far["near_tie"] is False
    assert near["near_tie"] == (abs(near["gap"]) <= NEAR_TIE["float32"])
    far_note = divergence_note(far, lossless=False, decode=tok.decode)
    assert "the method's rule kept a token the model ranks lower" in far_note and f"token {j}" in far_note
    assert ("near-tie" in divergence_note(near, lossless=False, decode=tok.decode)) == near["near_tie"]


def test_a_stopped_runs_cut_answer_gets_no_task_score():
    # third newcomer pass: a greedy run cut by Stop showed "score 31.8 (F1 …) · cancelled"
    from browser_util import synthetic_run

    from workbench.ui.shared import metrics_md

    done, stopped = synthetic_run("greedy"), synthetic_run("greedy", status="cancelled")
    assert "score **31.8**" in metrics_md(done, 1, None, 31.8, "F1")
    line = metrics_md(stopped, 2, None, 31.8, "F1")
    assert "score" not in line and "**cancelled**" in line, line


def test_the_closing_status_counts_its_runs():
    # third newcomer pass: "runs #92 stored" for a single run
    from workbench.ui.compare_tab import closing_status

    assert closing_status([92], "the store", False, None).startswith("done: run #92 stored")
    assert closing_status([92, 93], "the store", False, None).startswith("done: runs #92, #93 stored")
    assert "; run #92 stored" in closing_status([92], "the store", True, None)
