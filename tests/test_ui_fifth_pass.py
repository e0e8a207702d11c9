"""Issue 33, fifth newcomer pass (Compare, Replay and Diff): an empty prompt box beside a context, the re-run's
speed-ups, what CSD rescued, a task change clearing the last results, and the diff legend's placeholder."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.trace import NodeTrace, StepTrace
from workbench.evaluation.tasks.task import Task

EMPTY = "the prompt is empty: type a question or instruction"


def handlers(tasks, pool=None, store=None):
    from workbench.ui.compare_tab import CompareHandlers

    return CompareHandlers(store=store or SimpleNamespace(where="here"), pool=pool, tasks=tasks)


def first_status(h, **kw):
    """The status line of the first update of a comparison (the pool loads nothing: checks come first)."""
    from workbench.ui.compare_tab import PARAM_FIELDS

    args = dict(model_name="smollm2-135m", draft_name="", method_list=["greedy"], prompt_text="", context_text="")
    args |= dict(use_chat=True, max_new_tokens=4, task_choice="(free text)", uploaded_tasks={}, compress_rate=1.0)
    args |= dict(compressor="selfinfo", repeats=1) | {n: None for n in PARAM_FIELDS if n != "max_new_tokens"} | kw
    return next(h.compare(SimpleNamespace(session_hash="s"), **args))[0]


def test_an_empty_prompt_box_is_refused_even_with_a_context():
    """Cleared only the Prompt box and pressed Run: all three methods ran on the context alone. With both boxes
    empty the app said "the prompt is empty"; now it says so in both cases."""
    from workbench.ui.compare_tab import EMPTY_PROMPT

    pool = SimpleNamespace(allow_local=True, load=lambda *a: pytest.fail("a refused comparison loads no model"))
    h = handlers({}, pool)
    for context in ("", "The lighthouse at Harrow Point was built in 1871."):
        for prompt in ("", "  \n "):
            status = first_status(h, prompt_text=prompt, context_text=context)
            assert status.startswith("**⚠") and EMPTY in status, status
    assert "type a question or instruction" in EMPTY_PROMPT
    # a prompt in the box runs (the next update is "loading…")
    assert first_status(h, prompt_text="Who built it?", context_text="a document").startswith("loading")


def test_a_task_that_asks_inside_its_context_still_runs_with_an_empty_prompt_box():
    """A task file's row may put its question in the context (input ""): that task supplies the prompt."""
    pool = SimpleNamespace(allow_local=True, load=lambda *a: None)
    asks_in_context = Task("c1", "qa", "", context="Read this and answer: who built the lighthouse?")
    asks_in_prompt = Task("c2", "qa", "Who built it?", context="a document")
    h = handlers({"c2": asks_in_prompt}, pool)
    uploaded = {"upload:c1": asks_in_context}
    ran = first_status(
        h, context_text=asks_in_context.context, task_choice="upload:c1", uploaded_tasks=uploaded, prompt_text=""
    )
    assert ran.startswith("loading"), ran
    # a task with a prompt of its own whose box was cleared: refused, like free text
    refused = first_status(h, context_text="a document", task_choice="c2", prompt_text="")
    assert EMPTY in refused
    # the bundled samples all have their prompt in the box (code-stack's template fills it)
    from workbench import service
    from workbench.ui.compare_tab import task_fields

    assert all(task_fields(t)[1].strip() for t in service.sample_tasks())


def test_the_diff_legend_explains_the_placeholder_of_a_missing_token():
    """The legend explained ␣ and ↵ only; a cell's '·' (the run has no token there) was left to guess."""
    import re

    from workbench.ui.tokens import NO_TOKEN, token_diff_html

    page = token_diff_html(["a", "b", "c"], ["a", "c"], 1, ("#1 greedy", "#2 aasd"), ids=([1, 2, 3], [1, 3]))
    key = re.search(r'<div class="tokdiff-key"[^>]*>(.*?)</div>', page, re.S).group(1)
    assert re.search(rf">{re.escape(NO_TOKEN)}</span> this run has no token here", key), key
    # the cell that has it: B's side of A's dropped "b", greyed so it is not read as a token "·"
    cell = re.search(r'<span class="side b" data-no-token="1"[^>]*>([^<]*)</span>', page)
    assert cell and cell.group(1) == NO_TOKEN and "color:#999" in cell.group(0)


def test_picking_another_task_clears_the_previous_prompts_results():
    """After picking another task, the previous task's columns, speed table and note stayed under the new prompt."""
    from workbench.ui.compare_tab import CLEARED_OUTPUTS, FREE_TEXT, SLOTS

    h = handlers({"a": Task("a", "qa", "first?"), "b": Task("b", "qa", "second?", context="doc")})
    for choice in ("b", FREE_TEXT):
        out = h.pick_task(choice, {}, 128, 128, [12, 13, 14])
        assert len(out) == 5 + CLEARED_OUTPUTS
        heads, metrics = list(out[5 : 5 + SLOTS]), list(out[5 + SLOTS : 5 + 2 * SLOTS])
        texts = list(out[5 + 2 * SLOTS : 5 + 3 * SLOTS])
        figure, table, note, status = out[5 + 3 * SLOTS :]
        # the heads too (twentieth pass: a "greedy" head stood over the cleared columns)
        assert heads == [""] * SLOTS and metrics == [""] * SLOTS and texts == [""] * SLOTS and note == ""
        assert table.empty and not figure.data
        assert "cleared" in status and "#12, #13, #14" in status and "stay stored" in status
    # before any comparison the status is left alone (an upload's "loaded 3 tasks" line stays)
    assert h.pick_task("b", {}, 128, 128, [])[-1] == {"__type__": "update"}


def test_the_task_dropdown_is_wired_to_clear_the_results(tmp_path):
    """The handler's cleared values reach the page: the task change's outputs are the columns, the speeds, the
    note and the status (a handler test alone passes with the event still wired to the five fields)."""
    from workbench.service import ModelPool
    from workbench.ui import build_app
    from workbench.ui.compare_tab import SLOTS

    demo = build_app(db=str(tmp_path / "t.db"), pool=ModelPool("cpu", "float32"))
    (event,) = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "pick_task"]
    ids = [getattr(o, "elem_id", None) for o in event.outputs]
    want = [f"col-head-{i}" for i in range(SLOTS)]
    want += [f"col-metrics-{i}" for i in range(SLOTS)] + [f"col-text-{i}" for i in range(SLOTS)]
    want += ["compare-speed", "compare-speed-table", "compare-speed-note", "compare-status"]
    assert ids[5:] == want
    assert len(event.inputs) == 7  # the last comparison's run ids, for the status line; the boxes, for free text
    assert [getattr(i, "elem_id", None) for i in event.inputs[5:]] == ["compare-context", "compare-prompt"]


def csd_step(index: int, decisions: list[tuple[str, int | None, str]]) -> StepTrace:
    """A step of a chain: the root, then one draft node per (decision, memory count, reason), then the bonus."""

    def node(i, parent, decision, count=None, reason=""):
        source = "root" if parent < 0 else "context"
        return NodeTrace(index, 0, i, parent, max(i, 0), 100 + i, f"t{i}", source, decision, reason, mem_count=count)

    nodes = [node(0, -1, "accepted", reason="root")]
    nodes += [node(i, i - 1, d, c, r) for i, (d, c, r) in enumerate(decisions, start=1)]
    kept = sum(1 for d, _, _ in decisions if d in ("accepted", "rescued"))
    return StepTrace(index, 0, len(decisions), kept, [100 + i for i in range(kept + 1)], nodes=nodes)


def test_a_csd_column_says_how_many_tokens_it_rescued_and_why_none():
    """The default demo's csd column was token for token aasd[auto]'s, and nothing in it said that CSD's memory
    rescued nothing (only the memory tab did). The metrics line now says it, with the reason, and means it on hover."""
    import html
    import re

    from browser_util import synthetic_run

    from workbench.ui.shared import RESCUED_MEANING, rescued_md

    lam = {"lam": 6, "tau": 0.1}
    low = synthetic_run("csd", [csd_step(0, [("accepted", None, ""), ("rejected", 2, "count 2 < λ 6")])], params=lam)
    line = rescued_md(low)
    hover = re.search(r'<span[^>]*title="([^"]*)"[^>]*>rescued</span> \*\*0\*\* tokens \((.*)\)$', line)
    assert hover and html.unescape(hover.group(1)) == RESCUED_MEANING, line
    assert hover.group(2) == "no pair reached λ 6 this run: 1 rejection; the largest count was 2"
    # a pair at λ that the gate refused
    refused = [("rejected", 9, "count 9 ≥ λ 6; z(x) − z(t*) -4.1 < log τ -2.3"), ("rejected", 1, "count 1 < λ 6")]
    gated = synthetic_run("csd", [csd_step(0, refused[:1]), csd_step(1, refused[1:])], params=lam)
    assert "(1 of 2 rejections reached λ 6, but the logit gate (τ 0.1) refused 1)" in rescued_md(gated)
    # rescues are counted
    two = synthetic_run("csd", [csd_step(0, [("rescued", 7, ""), ("rescued", 8, "")]), csd_step(1, [])], params=lam)
    assert re.search(r">rescued</span> \*\*2\*\* tokens$", rescued_md(two))
    nothing_rejected = synthetic_run("csd", [csd_step(0, [("accepted", None, "")])], params=lam)
    assert "(no draft token was rejected this run)" in rescued_md(nothing_rejected)
    # methods without CSD's rescue say nothing of it
    assert rescued_md(synthetic_run("aasd", [csd_step(0, [("rejected", None, "")])])) == ""
    assert rescued_md(synthetic_run("greedy", [])) == ""


def test_the_compare_column_of_a_csd_run_carries_the_rescued_count(monkeypatch):
    """The line is in the column: Comparison._metrics (what each finished column shows) ends with it."""
    from browser_util import synthetic_run

    from workbench.ui.compare_tab import Comparison, Place

    comparison = Comparison.__new__(Comparison)
    comparison.task, comparison.n_repeats = None, 1
    monkeypatch.setattr(Comparison, "_fit_note", lambda self, run: "")
    monkeypatch.setattr(Comparison, "_memory_note", lambda self, run: "")
    run = synthetic_run("csd", [csd_step(0, [("rejected", 1, "count 1 < λ 6")])], params={"lam": 6})
    line = comparison._metrics(run, 241, 10.0, Place(3, 3, 1))
    assert ">rescued</span> **0** tokens (no pair reached λ 6 this run: 1 rejection; the largest count was 1)" in line


def timed_run(method: str, tokens: int, seconds: float, **fields):
    """A complete run that wrote `tokens` tokens, one step each, in `seconds` of decoding."""
    from browser_util import synthetic_run

    steps = [StepTrace(i, 10 + i, 0, 0, [i]) for i in range(tokens)]
    return synthetic_run(method, steps, decode_seconds=seconds, **fields)


def test_the_rerun_line_gives_speed_ups_against_the_greedy_run_of_the_same_workload():
    """Replay's re-run lines showed "speed-up –" for both runs, with no reason; run #240 showed 2.98× in Compare."""
    from workbench.ui import replay_view as rv

    cap = {"max_new_tokens": 32}
    greedy = timed_run("greedy", 30, 3.0, params=cap)  # 10 tok/s
    original, new = timed_run("aasd", 30, 1.0, params=cap), timed_run("aasd", 30, 1.5, params=cap)
    md = rv.rerun_outputs(240, original, new, 250, (239, greedy))[2]
    assert "speed-up 3.00×" in md.split("re-run #")[0] and "speed-up 2.00×" in md.split("re-run #")[1], md
    assert "speed-ups against greedy run #239 (the same prompt, model, float32 and token cap" in md
    # none stored: the line says why instead of a bare dash
    alone = rv.rerun_outputs(240, original, new, 250, None)[2]
    assert "speed-up –" in alone and "no speed-up: no complete greedy run of this prompt on smollm2-135m" in alone
    assert "run greedy beside it in Compare" in alone


def test_only_a_greedy_run_of_the_same_workload_is_a_reference():
    from workbench.ui import replay_view as rv

    run = timed_run("aasd", 4, 1.0, params={"max_new_tokens": 32})
    assert rv.same_workload(run, timed_run("greedy", 4, 1.0, params={"max_new_tokens": 32}))
    for other in (
        dict(prompt_ids=list(range(11))),
        dict(dtype="bfloat16"),
        dict(model="qwen2.5-coder-0.5b"),
        dict(params={"max_new_tokens": 64}),
    ):
        assert not rv.same_workload(run, timed_run("greedy", 4, 1.0, **{"params": {"max_new_tokens": 32}, **other}))
    # the comparison the run came from (greedy runs first) before a later one
    assert rv.greedy_candidates(240, [300, 239, 100, 241]) == [239, 100, 241, 300]


def test_the_rerun_handler_finds_the_greedy_run_the_original_came_from(tmp_path):
    """ReplayHandlers.greedy_of reads the store: the matching greedy run nearest before the original, never another
    prompt's, never a run the viewer may not see; a greedy run is its own reference."""
    from workbench.store import Store
    from workbench.ui.access import Viewer
    from workbench.ui.replay_tab import ReplayHandlers

    store = Store(str(tmp_path / "t.db"))
    cap = {"max_new_tokens": 32}
    mine, theirs = ("workbench", "owner:me"), ("workbench", "owner:them")
    early = store.save_run(timed_run("greedy", 8, 1.0, params=cap), mine)
    comparison_greedy = store.save_run(timed_run("greedy", 8, 1.0, params=cap), mine)
    store.save_run(timed_run("greedy", 8, 1.0, params=cap, prompt_ids=[1, 2]), mine)  # nearer, another prompt
    store.save_run(timed_run("greedy", 8, 1.0, params={"max_new_tokens": 64}), mine)  # nearer, another cap
    original_run = timed_run("aasd", 8, 0.5, params=cap)
    original = store.save_run(original_run, mine)
    store.save_run(timed_run("greedy", 8, 1.0, params=cap), theirs)  # newer, but not the viewer's
    h = ReplayHandlers(store, pool=None, cache=None)
    found = h.greedy_of(original, original_run, None)
    assert found is not None and found[0] == comparison_greedy  # its own comparison's
    newest_theirs = max(r.id for r in store.list_runs(method="greedy"))
    assert h.greedy_of(original, original_run, Viewer("owner:them"))[0] == newest_theirs  # theirs, after it
    assert h.greedy_of(original, original_run, Viewer("owner:me"))[0] == comparison_greedy
    assert h.greedy_of(original, original_run, Viewer("owner:nobody")) is None
    assert h.greedy_of(original, timed_run("aasd", 8, 0.5, params=cap, prompt_ids=[9]), None) is None
    assert h.greedy_of(early, store.load_run(early).trace, None)[0] == early


def test_a_refusal_in_the_status_line_follows_the_inputs_it_answered():
    """Issue 33 (first ten minutes), 2: Run's "the prompt is empty" stayed under the prompt after the user typed one (and
    picked a task, changed the model) until the next Run. The status is re-checked as those inputs change, by the
    checks Run makes (check_inputs): cleared when the refusal no longer applies, replaced by the one that does."""
    import gradio as gr

    pool = SimpleNamespace(allow_local=True, load=lambda *a: pytest.fail("a refused comparison loads no model"))
    task = Task("c2", "qa", "Who built it?", context="a document")
    h = handlers({"c2": task}, pool)
    refused = first_status(h, prompt_text="")
    assert EMPTY in refused
    args = dict(model_name="smollm2-135m", draft_name="", method_list=["greedy"], task_choice="(free text)")
    args |= dict(uploaded={}, upload_error="")
    assert h.recheck(refused, prompt_text="Who built it?", **args) == ""  # typed: cleared
    assert h.recheck(refused, prompt_text="", **args | {"task_choice": "c2"}) == refused  # still empty: kept
    needs_draft = h.recheck(refused, prompt_text="Who built it?", **args | {"method_list": ["sd"]})
    assert needs_draft.startswith("**⚠") and "needs a draft model" in needs_draft  # the one that applies now
    assert "bad line 3" in h.recheck(refused, prompt_text="x", **args | {"upload_error": "bad line 3"})
    # a comparison's own status, or an upload's line, is not a refusal: left alone
    assert h.recheck("done: run #3 stored", prompt_text="", **args) == gr.update()


def test_the_status_recheck_is_wired_to_the_inputs_it_reads(tmp_path):
    """The recheck reaches the page: it runs when the model, draft, methods, prompt or context change, and after a
    task change has filled the boxes in (pick_task writes the status too), and writes the status line."""
    from workbench.service import ModelPool
    from workbench.ui import build_app

    demo = build_app(db=str(tmp_path / "t.db"), pool=ModelPool("cpu", "float32"))
    events = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "recheck"]
    ids = {b.elem_id: b._id for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    triggers = {(block, name) for f in events for block, name in f.targets}
    for elem in ("compare-model", "compare-methods", "compare-prompt", "compare-context"):
        assert (ids[elem], "change") in triggers, elem
    assert any(f.trigger_after is not None for f in events)  # the .then after pick_task
    assert all([getattr(o, "elem_id", None) for o in f.outputs] == ["compare-status"] for f in events)
