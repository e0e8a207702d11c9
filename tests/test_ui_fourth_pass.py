"""Issue 33, fourth newcomer pass (the Compare tab's part): an uploaded task's token cap, the first divergence's
tie wording, MAL's meaning, the speed note's estimate, where fitted thresholds come from, stopped columns and
the Task dropdown's label."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbench.evaluation.tasks.task import Task


def handlers(tasks):
    from workbench.ui.compare_tab import CompareHandlers

    return CompareHandlers(store=None, pool=None, tasks=tasks)


def test_an_uploaded_tasks_cap_fills_the_field_as_written():
    """The newcomer uploaded a task with max_new_tokens 24 and the field showed 128 (the bundled samples' floor)."""
    sample = Task("s", "qa", "a question", max_new_tokens=48)
    uploaded = {"upload:q1": Task("q1", "qa", "a question", max_new_tokens=24), "upload:q2": Task("q2", "qa", "q")}
    h = handlers({"s": sample})
    # the field holds what the last task filled in (128 here): the uploaded task's own cap replaces it
    assert (
        h.pick_task("upload:q1", uploaded, 128, 128)[2] == 24 and h.pick_task("upload:q1", uploaded, 128, 128)[4] == 24
    )
    assert h.pick_task("upload:q2", uploaded, 24, 24)[2] == 128  # no cap in the file: the default
    assert h.pick_task("s", uploaded, 24, 24)[2] == 128  # a bundled sample keeps its floor, so its answer ends
    kept = h.pick_task("upload:q1", uploaded, 300, 128)  # the user's own cap is kept
    assert kept[4] == 128 and kept[2] == {"__type__": "update"}
    huge = {"upload:big": Task("big", "qa", "q", max_new_tokens=5000)}
    assert h.pick_task("upload:big", huge, 128, 128)[2] == 1024  # the field's end, not a value it refuses


def test_a_zero_logit_gap_is_an_exact_tie_and_the_float32_advice_says_how():
    """A gap of 0 read "a near-tie: the model all but equally prefers both", and "float32 removes most of these"
    named no way to get float32."""
    from workbench.commands import serve
    from workbench.ui.tokens import SERVE_FLOAT32, divergence_note, flip_title

    tie = {"position": 8, "greedy_token": 25, "token": 327, "gap": 0.0, "dtype": "bfloat16", "near_tie": True}
    note = divergence_note(tie, lossless=True)
    assert "an exact tie in bfloat16" in note and "near-tie" not in note and "all but equally" not in note
    assert f"`{SERVE_FLOAT32}`" in note
    assert "an exact tie" in flip_title(8, tie) and "near-tie" not in flip_title(8, tie)
    near = divergence_note(dict(tie, gap=0.06), lossless=True)
    assert "a near-tie:" in near and "exact" not in near and SERVE_FLOAT32 in near
    # in float32 there is nothing to switch to
    assert "serve" not in divergence_note(dict(tie, dtype="float32"), lossless=True)
    # the advice's command parses: serve takes --dtype float32
    import argparse

    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    args = parser.parse_args(SERVE_FLOAT32.split()[3:])
    assert args.dtype == "float32"


def test_mal_has_its_meaning_on_hover_in_a_columns_metrics():
    """Token acceptance had a hover; MAL, the main column metric, had none."""
    import html
    import re

    from browser_util import synthetic_run

    from core.trace import StepTrace
    from workbench.ui.shared import MAL_MEANING, metrics_md

    run = synthetic_run("aasd", [StepTrace(0, 0, 2, 2, [1, 2, 3])])
    line = metrics_md(run, 7, None)
    hover = re.search(r'<span[^>]*title="([^"]*)"[^>]*>MAL</span> \*\*3\.00\*\*', line)
    assert hover and html.unescape(hover.group(1)) == MAL_MEANING and "tokens written per target forward" in MAL_MEANING


def test_the_speed_note_is_an_estimate_that_measurements_may_exceed(monkeypatch):
    """The note opened "What bounds the speed-ups … the forwards allow ≈ 2.75× greedy" while runs measured 3.07×;
    t(n)/t(0) was unexplained."""
    import torch

    from core.sizing import CostCurve
    from workbench import service

    curve = CostCurve((0, 4, 16, 64), (0.05, 0.06, 0.10, 0.30))
    monkeypatch.setattr(service, "cached_curve", lambda target, length=None: curve)
    target = SimpleNamespace(device=torch.device("cpu"))
    note = service.speed_note(target, {"aasd": 4.0}, {"aasd": 2.4}, measured={"aasd": 2.45})
    assert "bound" not in note and "allow" not in note and "estimate" in note.lower()
    assert "MAL (tokens written per target forward)" in note and "takes 2.0× as long as a greedy step" in note
    assert "greedy's per-token Python work" in note and "pushes one above it, systematically" in note
    assert "streamed update" not in note  # updates come a few times a second, not per token (service.stream_run)
    assert "slowed" not in note  # within MAL × 1.05: no warning
    assert "other work slowed the greedy pass" in service.speed_note(
        target, {"aasd": 4.0}, {"aasd": 2.4}, measured={"aasd": 2.6}
    )


def test_fitted_thresholds_name_their_fit_its_dtype_and_items(tmp_path, monkeypatch):
    """aasd[auto] ran in bfloat16 on the shipped float32 fit (3 items per family) and said only "fitted thresholds:
    context α 0.1, β 0.3"."""
    import torch

    import core.thresholds as thresholds
    from workbench.ui.shared import fit_source_md

    monkeypatch.setattr(thresholds, "thresholds_path", lambda target: tmp_path / "no-user-fit.json")
    shipped = next(thresholds.SHIPPED_DIR.glob("*-float32.json"))
    target = SimpleNamespace(fingerprint=shipped.stem.rsplit("-", 1)[0], dtype=torch.bfloat16)
    fit, where, path, fit_dtype = thresholds.fit_origin(target, "aasd")
    assert (where, path, fit_dtype) == ("shipped (float32)", shipped, "float32")
    line = fit_source_md(fit, where, path, fit_dtype, "bfloat16")
    per_family = fit["items"]["per_family"]
    assert f"thresholds fitted in float32 on {per_family} held-out items per family" in line
    assert f"the shipped fit `{shipped.name}`" in line and "this run is bfloat16" in line
    same = fit_source_md(fit, where, path, fit_dtype, "float32")
    assert "this run is" not in same and shipped.name in same
    own = fit_source_md({"values": {}}, "home", tmp_path / "x-cpu-bfloat16.json", "bfloat16", "bfloat16")
    assert own == " · thresholds fitted in bfloat16 (your own fit `x-cpu-bfloat16.json`)"  # no item count recorded
    assert fit_source_md(None, "none", None, None, "float32") == ""
    assert "lossless" not in same  # SmolLM2's shipped fit is a relaxed one


def test_a_shipped_lossless_fit_says_its_values_decode_greedys_text(tmp_path, monkeypatch):
    """The Qwen2.5-Coder fit admitted no relaxed setting: its α 0, β 1 are the lossless ones, and the line says so."""
    import torch

    import core.thresholds as thresholds
    from workbench.ui.shared import fit_source_md

    monkeypatch.setattr(thresholds, "thresholds_path", lambda target: tmp_path / "no-user-fit.json")
    shipped = next(thresholds.SHIPPED_DIR.glob("*-bfloat16.json"))
    target = SimpleNamespace(fingerprint=shipped.stem.rsplit("-", 1)[0], dtype=torch.bfloat16)
    fit, where, path, fit_dtype = thresholds.fit_origin(target, "aasd")
    assert fit["relaxed"] is False and fit["values"]["beta"] == 1.0
    assert "these are the lossless ones: greedy's text" in fit_source_md(fit, where, path, fit_dtype, "bfloat16")


def test_a_cancelled_run_shows_no_speed_and_an_unstarted_column_says_so():
    """A column cancelled while reading its prompt showed "0.0 tok/s"; one Stop came before showed nothing."""
    from browser_util import synthetic_run

    from core.trace import StepTrace
    from workbench.ui.compare_tab import NOT_RUN, not_started
    from workbench.ui.shared import metrics_md

    steps = [StepTrace(0, 0, 2, 2, [1, 2, 3])]
    cancelled = metrics_md(synthetic_run("aasd", steps, status="cancelled"), 3, 10.0)
    assert "– tok/s" in cancelled and "speed-up –" in cancelled and "**cancelled**" in cancelled
    assert "– tok/s" not in metrics_md(synthetic_run("aasd", steps), 3, 10.0)
    assert not_started([0, 1, 2], {0}) == [1, 2] and not_started([0, 1], {0, 1}) == []
    assert NOT_RUN.strip("*") == "not run (stopped before it started)"


def test_the_task_dropdown_says_when_it_holds_an_uploaded_file(tmp_path):
    """The dropdown kept its "(bundled samples)" label while it held upload:my-q1."""
    from workbench.ui.compare_tab import TASK_LABEL

    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "my-q1", "task": "qa", "input": "why?", "max_new_tokens": 24}\n')
    h = handlers({"s": Task("s", "qa", "q")})
    dropdown = h.upload(str(good))[1]
    assert dropdown["value"] == "upload:my-q1" and "your file's 1 task" in dropdown["label"]
    assert dropdown["label"] != TASK_LABEL and "bundled samples" in dropdown["label"]
    assert h.upload(None)[1]["label"] == TASK_LABEL  # the file removed: the samples only again


# -- fifth-pass leftover of item 5: the prefill estimate follows the cost's growth with the prompt's length -------
def _prefill_run(tokens: int, seconds: float):
    return SimpleNamespace(prompt_ids=[0] * tokens, prefill_seconds=seconds, status="complete", steps=[])


def test_the_prefill_estimate_grows_with_attention_not_per_token(monkeypatch):
    """A per-node slope of t(n, L) that doubles from 1,000 to 4,000 cached tokens: a 4,000-token prompt, scaled
    from an observed 500-token prefill, is priced above 8x that prefill (one rate per token said exactly 8x),
    and the nearest observed prefill is the one scaled."""
    from core.cost_model import CostModel
    from workbench import service

    model = CostModel((0, 64), (1000, 4000), ((0.03, 0.03 + 64e-3), (0.03, 0.03 + 128e-3)))
    monkeypatch.setattr(service, "cost_model", lambda target: model)
    target = SimpleTarget()
    clock = service.PrefillClock()
    clock.observe(target, _prefill_run(500, 1.0))
    seconds, source = clock.estimate(target, 4000)
    assert seconds > 8 * 1.0 * 1.15 and "500-token" in source
    assert clock.estimate(target, 500)[0] == pytest.approx(1.0)
    clock.observe(target, _prefill_run(3000, 12.0))  # a nearer prefill replaces the far one's scale
    seconds, source = clock.estimate(target, 4000)
    assert "3,000-token" in source and 12.0 * 4 / 3 < seconds < 12.0 * 4 / 3 * 1.3


def test_without_a_prefill_seen_the_estimate_is_the_cost_models_and_says_it_is_low(monkeypatch):
    from core.cost_model import CostModel
    from workbench import service

    model = CostModel((0, 64), (1000,), ((0.03, 0.03 + 64e-3),))
    monkeypatch.setattr(service, "cost_model", lambda target: model)
    seconds, source = service.PrefillClock().estimate(SimpleTarget(), 2048)
    assert seconds == pytest.approx(2048e-3) and "first prefill takes longer" in source
    monkeypatch.setattr(service, "cost_model", lambda target: None)
    assert service.PrefillClock().estimate(SimpleTarget(), 2048) is None


class SimpleTarget:
    """What model_key reads of a loaded model."""

    name, device, dtype = "tiny", "cpu", "float32"
