"""Issue 33, the sixteenth newcomer pass: the pure functions behind its defects (the page behaviour is in
tests/test_browser_fifteenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import pytest
from browser_util import synthetic_run
from test_ui_fifth_pass import handlers

from core.trace import NodeTrace, StepTrace
from workbench.evaluation.tasks.task import Task


def test_free_text_keeps_typed_text_and_empties_a_tasks():
    """Defect 2: picking "(free text)" emptied the prompt and context boxes, wiping a prompt the user had typed. A
    task's own text is still cleared (free text starts empty, tests/test_browser.py)."""
    import gradio as gr

    from workbench.ui.compare_tab import FREE_TEXT

    h = handlers({"a": Task("a", "qa", "first?", context="doc")})
    typed = h.pick_task(FREE_TEXT, {}, 128, 128, [], context="doc", prompt="My own carefully written prompt")
    assert typed[0] == gr.update() and typed[1] == gr.update()  # left as they are
    assert typed[2:5] == (128, True, 128)  # the default cap, as before
    from_task = h.pick_task(FREE_TEXT, {}, 128, 128, [], context="doc", prompt="first?")
    assert from_task[:2] == ("", "")  # the task's text goes
    uploaded = {"upload:u": Task("u", "qa", "up?")}
    assert h.pick_task(FREE_TEXT, uploaded, 128, 128, [], context="", prompt="up?")[:2] == ("", "")
    assert h.pick_task(FREE_TEXT, {}, 40, 128, [], context="", prompt="mine")[2] == gr.update()  # the user's cap stays


def test_the_diff_shows_the_end_of_text_token_as_compare_does():
    """Defect 8: Compare ended a run with "■ end of text"; Diff showed the same token as a raw <|im_end|> cell."""
    from workbench.ui import tokens
    from workbench.ui.diff_tab import token_texts

    nodes = [
        NodeTrace(0, 3, 0, -1, 0, 9, "x", "root", "accepted", "root"),
        NodeTrace(0, 3, 1, 0, 1, 2, "<|im_end|>", "model", "bonus", "own", p=0.9),
    ]
    run = synthetic_run("greedy", [StepTrace(0, 3, 0, 0, [2], nodes=nodes)], stop_reason="eos")
    texts = token_texts(run, tokens.token_origins(run))
    assert texts == [tokens.END_TEXT], texts


def test_store_list_keeps_its_columns_and_gives_a_stopped_run_no_speed(tmp_path, capsys):
    """Defects 6 and 7: a method name longer than 15 characters pushed the rest of its row right, and a stopped run
    showed a partial tok/s (2.49) where the app says "–"."""
    from workbench.commands.main import main
    from workbench.store import Store

    url = f"sqlite:///{tmp_path / 't.db'}"
    with Store(url) as store:
        long = store.save_run(synthetic_run("hf-prompt-lookup", output_ids=[5, 6]))
        stopped = store.save_run(synthetic_run("greedy", output_ids=[5, 6, 7], status="cancelled"))
    assert main(["store", "list", "--db", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    head, rows = lines[0], {int(line.split()[0]): line for line in lines[1:]}
    for rid in (long, stopped):
        assert rows[rid].index("smollm2-135m") == head.index("model"), (head, rows[rid])  # the model column lines up
    assert rows[stopped].split()[-2] == "-", rows[stopped]  # tok/s, before the tags


def test_the_prefill_line_gives_a_range_when_reads_met_load(monkeypatch):
    """Sixteenth pass, moderate: the line priced a 6,709-token prompt at 82 s from reads made while the page was
    being drawn on the same core; it read in about 50 s. The line now gives a range from the fastest read's rate (an
    idle core) to the rate recent reads met, and one number when they agree. Mutation caught: prompt_note without
    `idle` (one number, 82 s, the old line)."""
    from types import SimpleNamespace

    from workbench import service
    from workbench.ui.compare_tab import prompt_note

    monkeypatch.setattr(service, "cost_model", lambda target: None)  # the shape is the token count
    target = SimpleNamespace(name="smollm2", device="cpu", dtype="float32")
    run = lambda n, s: SimpleNamespace(prompt_ids=[0] * n, prefill_seconds=s, status="complete", steps=[])  # noqa: E731
    clock = service.PrefillClock()
    assert clock.idle_estimate(target, 6709) is None
    clock.observe(target, run(256, 1.0), warm_up=True)  # an idle read: 1/256 s a token
    idle = clock.idle_estimate(target, 6709)
    assert idle == pytest.approx(6709 / 256)
    alone = prompt_note(6709, clock.estimate(target, 6709), 3, 8192, idle=idle)
    assert " to " not in alone.split("per method")[0]  # one reading: one number
    for _ in range(3):  # reads while the page was drawn: 2.2x slower
        clock.observe(target, run(600, 2.2 * 600 / 256))
    high, _ = clock.estimate(target, 6709)
    assert high > 1.5 * idle and clock.idle_estimate(target, 6709) == pytest.approx(idle)
    line = prompt_note(6709, clock.estimate(target, 6709), 3, 8192, idle=clock.idle_estimate(target, 6709))
    assert f"{idle:.0f} s to {high:.0f} s" in line and "idle core" in line
    assert idle < 50 < high  # the pass's read lies inside
