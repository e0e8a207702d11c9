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


# ---- the twentieth pass ----------------------------------------------------------------------------------------


def test_the_speed_note_says_one_node_in_the_singular(monkeypatch):
    """Minor: "aasd[auto]: trees of 1 nodes on average take 1.1× a greedy step" (code-stack sample)."""
    from types import SimpleNamespace

    import torch

    from core.sizing import CostCurve
    from workbench import service

    curve = CostCurve((0, 4, 16, 64), (0.05, 0.06, 0.10, 0.30))
    monkeypatch.setattr(service, "cached_curve", lambda target, length=None: curve)
    target = SimpleNamespace(device=torch.device("cpu"))
    note = service.speed_note(target, {"aasd[auto]": 1.2, "csd": 4.0}, {"aasd[auto]": 1.3, "csd": 2.0})
    # the twenty-second pass's note gives a size under 2 with a decimal, so "1 node(s)" is never written
    assert "aasd[auto]: trees of 1.2 nodes on average take" in note and "csd: trees of 4 nodes on average" in note, note
    assert " 1 nodes" not in note, note


def test_a_prompt_past_the_context_is_refused_in_the_words_of_the_line_before_run():
    """Minor: before Run "the prompt is 11,397 tokens; the model reads at most 8,192: shorten the context (or compress
    it …)"; after Run "the prompt has 11397 tokens but the model's context is 8192: … (or truncate its middle)", an
    option neither the app nor the CLI has."""
    from core.errors import InvalidInputError
    from core.step import check_prompt
    from workbench.ui.compare_tab import prompt_note

    with pytest.raises(InvalidInputError) as refused:
        check_prompt(list(range(11_397)), 8_192)
    said = str(refused.value)
    assert (
        said.startswith("the prompt is 11,397 tokens; the model reads at most 8,192: shorten")
        and "truncate" not in said
    )
    assert "compress" in said and "the prompt is 11,397 tokens; the model reads at most 8,192" in prompt_note(
        11_397, None, 1, 8_192
    )


def test_a_method_without_temperature_says_it_decoded_at_zero_beside_a_sampled_greedy():
    """Moderate: at temperature 0.8, greedy and pld sampled and aasd[auto] decoded deterministically, which nothing
    said: the field was not greyed (greedy reads it) and the column's note read as if both had sampled. The field's
    info and the column now say it. Mutations caught: sampling_note and field_info without it."""
    from browser_util import synthetic_run

    from workbench.ui.compare_tab import field_info, sampling_note

    greedy = synthetic_run("greedy", params={"temperature": 0.8, "seed": 0})
    aasd = synthetic_run("aasd", params={"alpha": 0.1, "fitted": 1})
    for div in (None, 3):  # with or without a divergence
        note = sampling_note(greedy, aasd, div)
        assert "takes no temperature: it decoded deterministically (temperature 0), while greedy sampled at 0.8" in note
    pld = synthetic_run("pld", params={"temperature": 0.8})
    assert "takes no temperature" not in sampling_note(greedy, pld, 3)  # pld samples too: the old note stands
    assert sampling_note(synthetic_run("greedy", params={"temperature": 0.0}), aasd, 3) == ""  # nothing sampled
    assert field_info("temperature", ["greedy", "aasd[auto]", "csd"]).endswith(
        "aasd[auto] takes no temperature: it decodes at 0"
    )
    assert "no temperature" not in field_info("temperature", ["greedy", "pld", "csd"])


# ---- the twenty-first pass -----------------------------------------------------------------------------------


def test_the_cpu_clock_note_claims_no_immunity_to_load():
    """Moderate: the note said a browser or "another program on the same core does not slow one method more than
    another"; beside a test suite the pass saw the same AASD settings at 2.84× and 0.84×. CPU time leaves out waiting,
    not the slowdown of shared caches and memory; the note and README now say so."""
    from pathlib import Path

    from workbench.ui.compare_tab import CPU_CLOCK_NOTE

    assert "does not slow one method more than another" not in CPU_CLOCK_NOTE
    assert "Other work still slows CPU time itself" in CPU_CLOCK_NOTE and "Repeats" in CPU_CLOCK_NOTE
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "does not slow one method more than another" not in readme and "It is not immune to load" in readme


def test_the_cut_and_stop_marks_do_not_break_across_lines():
    """Minor: "✂" stood at a line's end and "cut at max_new_tokens (32)" wrapped to the next, in a narrow column."""
    from browser_util import synthetic_run

    from workbench.ui.tokens import ending_html

    for reason in ("max_new_tokens", "cancelled", "context_full"):
        mark = ending_html(synthetic_run("greedy", stop_reason=reason, params={"max_new_tokens": 32}))
        assert "white-space:nowrap" in mark, (reason, mark)


def test_the_cli_writing_bar_reports_the_decoding_rate():
    """Minor: `generate --json` ended "8.58token/s" beside a tps of 0.92: tqdm's default rate is a recent-rate
    average, and the bar's clock started before the prompt's read. The bar now averages over decoding."""
    from workbench.commands.generate import _progress_bars

    reading, writing = _progress_bars(10, 8, as_json=True)
    with reading, writing:
        assert writing.smoothing == 0


def test_two_runs_of_one_method_are_told_apart_in_analytics():
    """Minor: Analytics colours runs by method (three methods, three colours), so #2 and #6 aasd[auto] were both red and
    #2's depth line lay hidden under another identical one. A method's second run is now dashed (lines) or hatched
    (bars). Mutation caught: restyled without the dash and the pattern."""
    from test_figures import aasd_step, csd_step, make_run

    from workbench.ui.analytics_tab import figures_of
    from workbench.ui.shared import asked_as

    runs = [
        make_run("aasd", [aasd_step(0), aasd_step(1)]),
        make_run("aasd", [aasd_step(0)]),
        make_run("csd", [csd_step()]),
    ]
    pairs = [(f"#{i} {asked_as(t.method, t.params)}", t) for i, t in zip((2, 6, 7), runs)]
    hist, depth, _, bars, _ = figures_of(pairs, None)
    lines = {t.name: t for t in depth.data if t.type == "scatter"}
    assert lines["#2 aasd"].line.color == lines["#6 aasd"].line.color != lines["#7 csd"].line.color
    assert lines["#2 aasd"].line.dash != lines["#6 aasd"].line.dash, (lines["#2 aasd"].line, lines["#6 aasd"].line)
    shapes = {t.name: t.marker.pattern.shape for t in hist.data if t.type == "bar"}
    assert shapes["#2 aasd"] != shapes["#6 aasd"], shapes
    per_run = [t for t in bars.data if t.type == "bar"][0]
    assert len(set(per_run.marker.pattern.shape[:2])) == 2, per_run.marker.pattern
