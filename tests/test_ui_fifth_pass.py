"""Issue 33, fifth newcomer pass (Compare, Replay and Diff): an empty prompt box beside a context, the re-run's
speed-ups, what CSD rescued, a task change clearing the last results, and the diff legend's placeholder."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

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
        metrics, texts = list(out[5 : 5 + SLOTS]), list(out[5 + SLOTS : 5 + 2 * SLOTS])
        figure, table, note, status = out[5 + 2 * SLOTS :]
        assert metrics == [""] * SLOTS and texts == [""] * SLOTS and note == ""
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
    want = [f"col-metrics-{i}" for i in range(SLOTS)] + [f"col-text-{i}" for i in range(SLOTS)]
    want += ["compare-speed", "compare-speed-table", "compare-speed-note", "compare-status"]
    assert ids[5:] == want
    assert len(event.inputs) == 5  # the last comparison's run ids, for the status line
