"""The workbench through its HTTP API (gradio_client), on the real default model: compare, replay,
re-scoring, export, and bad input that must come back as a readable message while the app keeps serving."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest

pytestmark = pytest.mark.real_model
SLOTS = 4


def compare(client, **kw):
    """status, 4 column heads, 4 metric lines, 4 token HTML blocks (the session's run ids stay server-side)."""
    out = client.predict(api_name="/compare", **kw)
    return out[0], out[1:1 + SLOTS], out[1 + SLOTS:1 + 2 * SLOTS], out[1 + 2 * SLOTS:]


@pytest.fixture(scope="module")
def default_comparison(app):
    demo, client = app
    status, heads, metrics, texts = compare(client, model_name="smollm2-135m", max_new_tokens=32)
    runs = demo.store.list_runs()
    return status, heads, metrics, texts, {r.method: r.id for r in runs}


def test_compare_fills_three_columns_and_stores_the_runs(default_comparison):
    status, heads, metrics, texts, ids = default_comparison
    assert status.startswith("done"), status
    assert [h.strip("# ") for h in heads[:3]] == ["greedy", "aasd", "csd"] and heads[3] == ""
    for m, t in zip(metrics[:3], texts[:3]):
        assert "MAL **" in m and "tok/s" in m and "steps" in m, m
        assert '<span class="tok' in t
    assert "speed-up 1.00×" in metrics[0]  # greedy is the reference
    assert set(ids) == {"greedy", "aasd", "csd"}
    # aasd copies from the context: some tokens are coloured as copied
    assert "tok-context" in texts[1]


def test_replay_moves_through_steps(app, default_comparison):
    _, client = app
    rid = default_comparison[-1]["aasd"]
    _, info = client.predict(rid, api_name="/load_run")[:2]
    assert f"loaded run #{rid}" in info
    first = client.predict(rid, 0, api_name="/replay_step")
    second = client.predict(rid, 1, api_name="/replay_step")
    assert "step 0 of 0–" in first[0] and "step 1 of 0–" in second[0]
    assert len(second[1]) > len(first[1])  # more text is shown at the later step
    assert first[2]["type"] == "plotly" and first[3]["type"] == "plotly"
    assert first[4]["headers"][:3] == ["node", "parent", "depth"]


def test_rescoring_with_own_params_changes_nothing_and_a_lower_threshold_flips(app, default_comparison):
    _, client = app
    rid = default_comparison[-1]["aasd"]
    client.predict(rid, api_name="/load_run")
    own = "(the run's own)"
    same = client.predict(rid, own, 0.1, 0.1, 0.1, 0.01, 6, api_name="/rescore")
    assert "no decision changes" in same[0], same[0]
    lenient = client.predict(rid, own, 0.1, 0.0, 0.001, 0.01, 6, api_name="/rescore")  # α = 0, β = 0.001
    assert "first change at step" in lenient[0], lenient[0]
    rows = lenient[1]["data"]
    assert rows and {r[lenient[1]["headers"].index("new_decision")] for r in rows} & {"accepted"}
    # CASD's fixed δ on the same drafts: a tiny δ accepts copied tokens the adaptive rule refused
    fixed = client.predict(rid, "aasd-fixed", 0.001, 0.1, 0.1, 0.01, 6, api_name="/rescore")
    assert fixed[0].startswith("aasd-fixed: δ = 0.001") and "first change at step" in fixed[0], fixed[0]


def test_rerun_with_new_settings_stores_a_second_run(app, default_comparison):
    demo, client = app
    rid = default_comparison[-1]["aasd"]
    client.predict(rid, api_name="/load_run")
    before = {r.id for r in demo.store.list_runs()}
    original, rerun, md = client.predict(rid, "(the run's own)", 0.1, 0.0, 0.001, 0.01, 6, api_name="/rerun")
    new = {r.id for r in demo.store.list_runs()} - before
    assert len(new) == 1 and f"re-run #{new.pop()}" in md and original and rerun


def test_export_zip_holds_the_runs_csv(app, default_comparison):
    _, client = app
    ids = sorted(default_comparison[-1].values())
    path, note = client.predict(ids, api_name="/export")
    assert "exported 3 run(s)" in note
    with zipfile.ZipFile(path) as z:
        assert set(z.namelist()) == {"runs.csv", "steps.csv", "nodes.csv"}
        runs = list(csv.DictReader(io.TextIOWrapper(z.open("runs.csv"), encoding="utf-8")))
    assert sorted(int(r["run_id"]) for r in runs) == ids


@pytest.mark.parametrize("kw, message", [
    (dict(prompt_text="", context_text=""), "the prompt is empty"),
    (dict(context_text="lighthouse keeper " * 6000), "context is 8192"),
    (dict(method_list=["casd"], param_7=2.0), "delta = 2.0 is out of range"),
    (dict(model_name="nobody/no-such-model"), "could not load 'nobody/no-such-model'"),
    (dict(model_name="qwen2.5-coder-1.5b", method_list=["csd"]), "needs a draft model"),
    (dict(method_list=["no-such-method"]), "unknown method 'no-such-method'"),
])
def test_bad_input_shows_a_message_and_the_app_keeps_serving(app, kw, message):
    _, client = app
    args = dict(model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=4) | kw
    status, *_ = compare(client, **args)
    assert status.startswith("**⚠") and message in status, status
    status, *_ = compare(client, model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=2)
    assert status.startswith("done"), status
