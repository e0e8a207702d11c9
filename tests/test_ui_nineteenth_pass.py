"""Issue 33, the nineteenth newcomer pass: the defects fixed at once (the refusal's wording and Run's status line are
tested in tests/test_ui_streaming.py and tests/test_ui_thirteenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

from core.trace import RunTrace


def test_typing_a_run_id_and_enter_picks_that_run_not_a_longer_id(tmp_path):
    """Moderate: in Diff, "#4" and Enter picked run #42 (the pickers listed the newest first; a dropdown keeps the
    labels holding the typed text and Enter takes the first). The choices now come by ascending id."""
    from workbench.store import Store
    from workbench.ui.shared import run_choices

    store = Store(f"sqlite:///{tmp_path / 'traces.db'}")
    for _ in range(42):
        store.save_run(RunTrace("greedy", {}, "smollm2-135m", None, "cpu", "float32", "p", [1], status="complete"))
    choices = run_choices(store)

    def enter(typed: str) -> int:  # what Gradio's dropdown does: keep the labels holding the text, take the first
        return next(i for label, i in choices if typed.lower() in label.lower())

    assert enter("#4") == 4 and enter("#1") == 1 and enter("#42") == 42 and enter("#2") == 2


def test_counts_of_one_take_the_singular():
    """Minor: Diff's "aligned: 1 tokens replaced" and the CSD memory's "1 tokens by 1 pairs"."""
    from workbench.ui.shared import counted

    assert counted(1, "token") == "1 token" and counted(2, "pair") == "2 pairs" and counted(0, "token") == "0 tokens"
    assert counted(1_234, "token") == "1,234 tokens"


def test_the_top_k_label_includes_its_zero_in_the_range():
    """Minor: "top_k: 0 = each method's own default, range [1, 1000000]": the default outside the range shown."""
    from workbench.ui.compare_tab import field_label

    label = field_label("top_k")
    assert "0 = each method's own default" in label and "range 0 or [1, 1000000]" in label, label
