"""Issue 33, the eighteenth newcomer pass: the defects whose cause is a pure function or a text (the refusal that
kept no columns is tested in tests/test_ui_streaming.py and tests/test_browser.py, SIGTERM in
tests/test_serve_signals.py). Each failed on the code before its fix."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def test_the_prefill_estimate_is_for_the_compressed_prompt(monkeypatch):
    """Minor: with compress 0.3 the line still read "prompt: 221 tokens · reading it takes ≈ 0.6 s to 1.6 s", as at
    compress 1, though the model then read 88 of 176 context tokens. Mutation caught: prompt_info ignoring the rate
    (the estimate is asked for 221 tokens)."""
    from workbench import service
    from workbench.ui.compare_tab import CompareHandlers, compressed_length

    assert compressed_length(221, 176, 0.3) == 221 - 123
    assert compressed_length(221, 176, 1.0) == 221 and compressed_length(10, 50, 0.0) == 1
    monkeypatch.setattr(service, "build_prompt", lambda tok, prompt, context, chat: ("t", list(range(221))))
    asked: list[int] = []
    tokenizer = lambda text: SimpleNamespace(input_ids=list(range(176)))  # noqa: E731 - the context's tokens
    models = SimpleNamespace(target=SimpleNamespace(tokenizer=tokenizer, max_context=8192, dtype="float32"))
    pool = SimpleNamespace(
        loaded=lambda name: models,
        prefill_clock=SimpleNamespace(
            estimate=lambda target, n: asked.append(n) or (n / 100, "this server"), idle_estimate=lambda t, n: None
        ),
    )
    h = CompareHandlers(None, pool, {})
    line = h.prompt_info("m", "Summarise it", "a long document", True, ["greedy"], 0.3)
    assert asked == [98] and "221 tokens" in line and "≈ **98** read once the context is compressed to 0.3" in line
    asked.clear()
    plain = h.prompt_info("m", "Summarise it", "a long document", True, ["greedy"], None)
    assert asked == [221] and "compressed" not in plain


def test_one_observation_is_singular():
    """Minor: "⚠ memory: 1 observations added since the shipped table"."""
    from workbench.ui.compare_tab import memory_note

    grown = {"memory_mode": 0, "memory_sha": "b" * 16, "memory_observations": 1331}
    assert "**1 observation added since the shipped table**" in memory_note(grown, 1330, "a" * 16, "e.json")
    assert "**2 observations added" in memory_note({**grown, "memory_observations": 1332}, 1330, "a" * 16, "e.json")


def test_the_one_value_sweep_suggests_a_method_that_takes_the_parameter():
    """Minor: Analytics suggested "method variants such as aasd[delta=…]", which `generate` refuses ("parameter
    'delta' has no effect on aasd"). The hint now names a method among the chosen runs that takes it."""
    from core.methods import get_method
    from core.trace import RunTrace
    from workbench.ui.figures.analytics import sweep_figure

    run = RunTrace("casd", {"delta": 0.1}, "m", None, "cpu", "float32", "p", [1, 2], status="complete")
    run.external_accept_lengths = [2, 3]
    text = sweep_figure([run], "delta").layout.annotations[0].text
    hint = re.search(r"such as (\w[\w-]*)\[delta=", text)
    assert hint, text
    assert "delta" in get_method(hint.group(1)).params, hint.group(1)


def test_the_readme_lists_every_csv_column_in_order():
    """Minor: the exported runs.csv has `method_label` and nodes.csv `reason_text`, which README's lists lacked."""
    from workbench.store.csv_io import csv_columns

    readme = (ROOT / "README.md").read_text()
    for name in ("runs", "steps", "nodes"):
        block = re.search(rf"^- `{name}\.csv`: (.*?)(?=^- `|^\s*$)", readme, re.M | re.S)
        assert block, name
        listed = [c for c in re.findall(r"`([a-z_]+)`", block.group(1)) if c in set(csv_columns(name))]
        assert list(dict.fromkeys(listed)) == csv_columns(name), (name, listed)


def test_the_readmes_first_caption_is_short_and_speaks_to_a_newcomer():
    """Minor: the hero picture's caption ran to ~30 lines of the project's own history ("In newcomers' browser
    sessions…", "Which part of the two curves decided it is not settled")."""
    readme = (ROOT / "README.md").read_text()
    caption = re.search(r"\n\*The picture: (.*?)\*\n", readme, re.S)
    assert caption, "the caption under the first picture moved: update this test"
    text = caption.group(1)
    assert len(text.splitlines()) <= 14, len(text.splitlines())
    assert "newcomer" not in text and "not settled" not in text


def test_the_context_box_says_the_drafters_copy_from_the_whole_prompt():
    """Minor: "context" draft nodes held <|im_start|> and the system line, under a box labelled "Context (the draft
    pool; optional)". The label no longer calls the box the pool, and its info says what the pool is."""
    from workbench.ui import compare_tab

    source = Path(compare_tab.__file__).read_text()
    assert "the draft pool; optional" not in source
    assert "drafts copy from the whole prompt, chat template included" in source
