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
