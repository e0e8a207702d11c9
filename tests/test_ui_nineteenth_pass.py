"""Issue 33, the nineteenth newcomer pass: the defects fixed at once (the refusal's wording and Run's status line are
tested in tests/test_ui_streaming.py and tests/test_ui_thirteenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import pytest

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


# ---- the four defects left open at the nineteenth pass, fixed in the next stop ----------------------------------


def test_a_variant_is_named_with_the_parameters_it_was_asked_with():
    """Moderate: runs of `aasd[alpha=0.05]` were listed as "aasd" in Replay's table and header, Analytics and the
    pickers; only `[auto]` was named. A stored run is now named by the parameters that differ from its method's
    defaults, as the methods box takes them. Mutation caught: asked_as without `changed` (every variant "aasd")."""
    from core.methods import asked_as as cli_name
    from core.methods import changed_params, resolve_params
    from workbench.ui.shared import asked_as

    assert asked_as("aasd", resolve_params("aasd", {"alpha": "0.05"})) == "aasd[alpha=0.05]"
    assert (
        asked_as("aasd", resolve_params("aasd", {"alpha": "0.05", "max_nodes": "8"})) == "aasd[max_nodes=8,alpha=0.05]"
    )
    assert asked_as("aasd", resolve_params("aasd")) == "aasd"  # the defaults: the bare name
    assert asked_as("aasd", resolve_params("aasd", {"max_new_tokens": "16"})) == "aasd"  # the comparison's own cap
    fitted = resolve_params("aasd", {"fitted": "1"}) | {"alpha": 0.3, "beta": 0.05}  # what the fit set
    assert asked_as("aasd", fitted) == "aasd[auto]"
    assert cli_name("csd", resolve_params("csd", {"keys": "text"})) == "csd[keys=text]"  # the word, not 1
    # the app's plain csd reads the shipped memory; the CLI's reads none, so it names that run by its memory
    shipped = resolve_params("csd", {"memory_mode": "shipped"})
    assert asked_as("csd", shipped) == "csd" and cli_name("csd", shipped) == "csd[memory_mode=shipped]"
    assert changed_params("hf-generate", {"max_new_tokens": 9}) == {} and asked_as("gone", {}) == "gone"
    # what a run records beside its parameters is not a parameter
    assert asked_as("csd", shipped | {"memory_sha": "ab12", "eos_ids": [2], "cost_model_ms": "L=256 0:1"}) == "csd"


@pytest.mark.real_model
def test_a_variant_run_of_the_real_model_is_named_alike_everywhere(smollm2, tmp_path):
    """The same on a run SmolLM2 made: the runs table, the run pickers, Replay's header and runs.csv's method_label
    all say `aasd[alpha=0.05]`."""
    import csv

    from core.methods import resolve_params, run_method
    from workbench.store import Store
    from workbench.ui.replay_view import step_info
    from workbench.ui.shared import run_choices, runs_frame

    prompt = smollm2.tokenizer("The capital of France is", return_tensors=None)["input_ids"]
    run = run_method("aasd", smollm2, prompt, resolve_params("aasd", {"alpha": "0.05", "max_new_tokens": "6"}))
    store = Store(f"sqlite:///{tmp_path / 'traces.db'}")
    rid = store.save_run(run)
    assert runs_frame(store)["method"].tolist() == ["aasd[alpha=0.05]"]
    assert run_choices(store) == [(f"#{rid} aasd[alpha=0.05] · {run.model}", rid)]
    assert f"run #{rid} · aasd[alpha=0.05] · step 0" in step_info(rid, store.load_run(rid).trace, 0)
    store.export_csv([rid], tmp_path / "csv")
    with open(tmp_path / "csv" / "runs.csv", newline="") as f:
        assert [row["method_label"] for row in csv.DictReader(f)] == ["aasd[alpha=0.05]"]


def test_the_diff_draws_the_end_of_text_mark_without_space_signs():
    """Minor: Diff showed the end-of-text cell as "■␣end␣of␣text": the mark went through the token drawing, which
    makes spaces visible. Mutation caught: token_diff_html without its END_TEXT case."""
    from workbench.ui import tokens

    html = tokens.token_diff_html(["a", tokens.END_TEXT], ["a", "b"])
    assert tokens.END_TEXT in html and "■␣end" not in html, html


def test_a_flip_that_passed_but_lost_to_another_path_reads_not_taken():
    """Minor: the re-score table said "rejected" beside "passed, but a longer or likelier path was chosen"; it says
    "not taken". A node that failed its test still reads "rejected". Mutation caught: flips_frame without it."""
    from core.walk import PASSED_NOT_TAKEN
    from workbench.rescore import NodeRescore, RunRescore, StepRescore
    from workbench.ui.replay_view import NOT_TAKEN, flips_frame

    def node(i, reason):
        return NodeRescore(i, 0, 1, 7, " x", "context", 0.4, "accepted", 0.5, "p ≥ θ", "rejected", 0.3, reason)

    step = StepRescore(3, 1, 0, [node(1, f"p 0.4 ≥ θ 0.3; {PASSED_NOT_TAKEN}"), node(2, "p 0.4 < θ 0.5")])
    frame = flips_frame(RunRescore("casd", {}, [step], 3, 4, 2.0, 1.0, False, 2.0))
    assert frame["new decision"].tolist() == [NOT_TAKEN, "rejected"], frame
