"""The workbench through its HTTP API (gradio_client), on the real default model: compare, replay,
re-scoring, export, and bad input that must come back as a readable message while the app keeps serving.
Also the replay's pure helpers (workbench/ui/replay_view.py) on a hand-built run, without the app."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from types import SimpleNamespace

import pytest

from core.params import PARAMS
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.ui import replay_view as rv
from workbench.ui.builder import newest_run_id
from workbench.ui.compare_tab import FLIP_CLASS, flip_applies, flip_mark
from workbench.ui.diff_tab import diff_outputs, token_texts
from workbench.ui.shared import TUNABLE, param_label, runs_frame, step_ends

real_model = pytest.mark.real_model
SLOTS = 4


def compare(client, **kw):
    """status, 4 column heads, 4 metric lines, 4 token HTML blocks (the session's run ids stay server-side; the speed
    chart and table come last)."""
    out = client.predict(api_name="/compare", **kw)
    return out[0], out[1 : 1 + SLOTS], out[1 + SLOTS : 1 + 2 * SLOTS], out[1 + 2 * SLOTS : 1 + 3 * SLOTS]


@pytest.fixture(scope="module")
def default_comparison(app):
    demo, client = app
    # A fixed tree size (a named API parameter): max_nodes=auto sizes trees from t(n) measured in this test's fresh home,
    # and on a busy machine that curve can make every tree too costly to draft.
    status, heads, metrics, texts = compare(client, model_name="smollm2-135m", max_new_tokens=32, max_nodes=16)
    runs = demo.store.list_runs()
    return status, heads, metrics, texts, {r.method: r.id for r in runs}


@real_model
def test_compare_fills_three_columns_and_stores_the_runs(default_comparison):
    status, heads, metrics, texts, ids = default_comparison
    assert status.startswith("done"), status
    from workbench.service import DEFAULT_METHODS  # aasd[auto] where the default model has a shipped fit

    titles = [h.strip("# ") for h in heads[:3]]  # the title alone: a note (csd without a draft model) is under the text
    assert titles == list(DEFAULT_METHODS) and heads[3] == ""
    assert "no draft model" in metrics[2] and "no draft model" not in metrics[1]
    for m, t in zip(metrics[:3], texts[:3]):
        assert "MAL</span> **" in m and "tok/s" in m and "steps" in m, m
        assert '<span class="tok' in t
    assert "speed-up 1.00×" in metrics[0]  # greedy is the reference
    assert set(ids) == {"greedy", "aasd", "csd"}
    # aasd copies from the context: some tokens are coloured as copied
    assert "tok-context" in texts[1]
    if DEFAULT_METHODS[1] == "aasd[auto]":  # its fitted thresholds say which fit file they came from
        assert "fitted thresholds:" in metrics[1] and re.search(
            r"thresholds fitted in \w+.*fit `[^`]+\.json`", metrics[1]
        )


@real_model
def test_the_csd_column_says_how_many_tokens_its_memory_rescued(app, default_comparison):
    """Issue 33, fifth pass, item 11: the csd column gives the count the memory tab gave (and why it is 0)."""
    demo, _ = app
    _, heads, metrics, _, ids = default_comparison
    stored = demo.store.load_run(ids["csd"]).trace
    rescued = sum(1 for s in stored.steps for n in s.nodes if n.decision == "rescued")
    assert re.search(rf">rescued</span> \*\*{rescued}\*\* tokens?", metrics[2]), metrics[2]
    assert rescued or "(no " in metrics[2] or "reached λ" in metrics[2]  # a zero says why
    assert ">rescued</span>" not in metrics[0] + metrics[1]  # greedy and aasd rescue nothing


@real_model
def test_compare_scores_a_bundled_task_with_bench_scorer(app, default_comparison):
    """The default task carries references: each column shows the score bench would give its stored output."""
    from workbench import service
    from workbench.evaluation.scores import score_task

    demo, client = app
    status, heads, metrics, texts, ids = default_comparison
    task = service.sample_tasks()[0]
    for head, line in zip(heads[:3], metrics[:3]):
        title = head.splitlines()[0].strip("# ")
        run = demo.store.load_run(ids[title.split("[")[0]]).trace  # ids by method name: aasd[auto] is aasd
        assert f"score **{score_task(task, run.output_text):.1f}**" in line, line
    _, _, free, _ = compare(
        client, model_name="smollm2-135m", method_list=["greedy"], prompt_text="Say hi.", max_new_tokens=4
    )
    assert "score" not in free[0]  # an edited prompt has no references that apply


@real_model
def test_replay_moves_through_steps(app, default_comparison):
    _, client = app
    rid = default_comparison[-1]["aasd"]
    _, info = client.predict(rid, api_name="/load_run")[:2]
    assert f"loaded run #{rid}" in info
    first = client.predict(rid, 0, api_name="/replay_step")
    second = client.predict(rid, 1, api_name="/replay_step")
    assert "step 0 (of 0–" in first[0] and "step 1 (of 0–" in second[0]
    assert len(second[1]) > len(first[1])  # more text is shown at the later step
    assert first[2]["type"] == "plotly" and first[3]["type"] == "plotly"
    assert first[4]["headers"][:3] == ["node", "parent", "depth"]


@real_model
def test_rescoring_with_own_params_changes_nothing_and_a_lower_threshold_flips(app, default_comparison):
    demo, client = app
    rid = default_comparison[-1]["aasd"]
    client.predict(rid, api_name="/load_run")
    own = "(the run's own)"
    params = demo.store.load_run(rid).trace.params  # aasd[auto]: the shipped fit's α, β, not the paper's
    same = client.predict(rid, own, 0.1, params["alpha"], params["beta"], 0.01, 6, api_name="/rescore")
    assert "no decision changes" in same[0], same[0]
    lenient = client.predict(rid, own, 0.1, 0.0, 0.001, 0.01, 6, api_name="/rescore")  # α = 0, β = 0.001
    assert "first change at step" in lenient[0], lenient[0]
    rows = lenient[1]["data"]
    assert rows and {r[lenient[1]["headers"].index("new decision")] for r in rows} & {"accepted"}
    # CASD's fixed δ on the same drafts: a tiny δ accepts copied tokens the adaptive rule refused
    fixed = client.predict(rid, "aasd-fixed", 0.001, 0.1, 0.1, 0.01, 6, api_name="/rescore")
    assert fixed[0].startswith("aasd-fixed: δ = 0.001") and "first change at step" in fixed[0], fixed[0]


@real_model
def test_rerun_with_new_settings_stores_a_second_run(app, default_comparison):
    demo, client = app
    rid = default_comparison[-1]["aasd"]
    client.predict(rid, api_name="/load_run")
    before = {r.id for r in demo.store.list_runs()}
    original, rerun, md, listed = client.predict(rid, "(the run's own)", 0.1, 0.0, 0.001, 0.01, 6, api_name="/rerun")
    new = {r.id for r in demo.store.list_runs()} - before
    assert len(new) == 1 and f"re-run #{new.pop()}" in md and original and rerun
    # both lines give a speed-up against the comparison's greedy run, and say which it is (fifth pass, item 9)
    assert f"speed-ups against greedy run #{default_comparison[-1]['greedy']} (the same prompt" in md, md
    assert len(re.findall(r"speed-up \d+\.\d\d×", md)) == 2, md


@real_model
def test_export_zip_holds_the_runs_csv(app, default_comparison):
    _, client = app
    ids = sorted(default_comparison[-1].values())
    path, note = client.predict(ids, api_name="/export")
    assert "exported 3 run(s)" in note
    with zipfile.ZipFile(path) as z:
        assert set(z.namelist()) == {"runs.csv", "steps.csv", "nodes.csv"}
        runs = list(csv.DictReader(io.TextIOWrapper(z.open("runs.csv"), encoding="utf-8")))
    assert sorted(int(r["run_id"]) for r in runs) == ids


@real_model
def test_diff_of_two_stored_runs_states_the_first_divergence(app, default_comparison):
    demo, client = app
    ids = default_comparison[-1]
    greedy, aasd = (demo.store.load_run(ids[m]).trace for m in ("greedy", "aasd"))
    summary, body = client.predict(ids["greedy"], ids["aasd"], api_name="/diff")
    from core.stats import first_divergence

    j = first_divergence(greedy.output_ids, aasd.output_ids)
    if j is None:
        assert summary.startswith("**identical**") and "pair differ" not in body
    else:
        assert f"first divergence at token {j}**" in summary and 'class="pair differ first"' in body
    assert body.count('class="pair ') == max(len(greedy.output_ids), len(aasd.output_ids))
    # the same run against itself, and a run this session cannot see, which reads like a missing one
    same, _ = client.predict(ids["aasd"], f"#{ids['aasd']} aasd", api_name="/diff")
    assert same.startswith("**identical**")
    missing, body = client.predict(ids["greedy"], 99999, api_name="/diff")
    assert missing.startswith("**⚠ no run 99999") and body == ""


@real_model
def test_replay_draws_the_runs_acceptance_per_position(app, default_comparison):
    _, client = app
    by_source, positions = client.predict(default_comparison[-1]["aasd"], api_name="/run_figures")
    assert by_source["type"] == "plotly" and positions["type"] == "plotly"
    assert "acceptance per draft position" in positions["plot"]


@real_model
@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(prompt_text="", context_text=""), "the prompt is empty"),
        (dict(context_text="lighthouse keeper " * 6000), "the model reads at most 8,192"),
        (dict(method_list=["casd"], delta=2.0), "delta = 2.0 is out of range"),
        # offline: refused before transformers retries the hub (workbench.ui.shared.check_model_source); online: the hub's answer
        (dict(model_name="nobody/no-such-model"), "'nobody/no-such-model'"),
        (dict(model_name="qwen2.5-coder-1.5b", method_list=["csd"]), "needs a draft model"),
        (dict(method_list=["no-such-method"]), "unknown method 'no-such-method'"),
    ],
)
def test_bad_input_shows_a_message_and_the_app_keeps_serving(app, kw, message):
    _, client = app
    args = dict(model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=4) | kw
    status, *_ = compare(client, **args)
    assert status.startswith("**⚠") and message in status, status
    status, *_ = compare(client, model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=2)
    assert status.startswith("done"), status


# ---------------------------------------------------------------- replay helpers (no app)


def chain_step(index: int, tokens: list[str], accepted: int) -> StepTrace:
    """root -> a chain of context nodes, the first `accepted` accepted and the next rejected, then the bonus."""
    nodes = [
        NodeTrace(
            step=index,
            cache_pos=0,
            node=0,
            parent=-1,
            depth=0,
            token_id=0,
            token_text="^",
            source="root",
            decision="accepted",
            reason="root",
        )
    ]
    for i, text in enumerate(tokens[:-1], start=1):
        decision = "accepted" if i <= accepted else "rejected" if i == accepted + 1 else "unreached"
        nodes.append(
            NodeTrace(
                step=index,
                cache_pos=0,
                node=i,
                parent=i - 1,
                depth=i,
                token_id=i,
                token_text=text,
                source="context",
                decision=decision,
                reason=decision,
                p=0.123456,
                threshold=0.2,
            )
        )
    nodes.append(
        NodeTrace(
            step=index,
            cache_pos=0,
            node=len(tokens),
            parent=accepted,
            depth=accepted + 1,
            token_id=99,
            token_text=tokens[-1],
            source="model",
            decision="bonus",
            reason="bonus",
        )
    )
    return StepTrace(
        index=index,
        cache_pos=0,
        tree_size=len(tokens) - 1,
        accepted=accepted,
        emitted=list(range(accepted + 1)),
        nodes=nodes,
        draft_ms=1.0,
        forward_ms=2.0,
    )


REPLAY_RUN = "aasd[max_nodes=16,alpha=0.3,beta=0.05]"  # replay_run as asked: its parameters off aasd's defaults


@pytest.fixture
def replay_run() -> RunTrace:
    steps = [chain_step(0, [" a", " b", " x", "!"], accepted=2), chain_step(1, [" c", " y", "?"], accepted=0)]
    return RunTrace(
        method="aasd",
        params={"alpha": 0.3, "beta": 0.05, "max_nodes": 16},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=[0, 1, 2, 0],
        steps=steps,
        decode_seconds=1.0,
    )


def test_replay_step_outputs_show_the_text_so_far_and_the_step(replay_run):
    origins = [(" a", "context"), (" b", "context"), ("!", "model"), ("?", "model")]
    info, text, tree, thresholds, nodes = rv.step_outputs(7, replay_run, origins, step_ends(replay_run), 0)
    assert info.startswith(f"run #7 · {REPLAY_RUN} · step 0 (of 0–1) · tree 3 nodes · accepted 2 + bonus")
    assert re.findall(r'title="(\w+)">([^<]*)</span>', text) == [("context", " a"), ("context", " b"), ("model", "!")]
    assert tree is not None and thresholds is not None
    assert list(nodes.columns) == list(rv.NODE_COLUMNS) and len(nodes) == 5
    assert list(nodes["decision"]) == ["accepted", "accepted", "accepted", "rejected", "bonus"]
    assert nodes["p"].iloc[1] == 0.1235  # four significant digits
    # a step past the end (the slider of another run) shows the last step, with all the text
    info, text, *_ = rv.step_outputs(7, replay_run, origins, step_ends(replay_run), 99)
    assert "step 1 (of 0–1)" in info and text.count("<span") == 4


def test_replay_of_a_run_without_steps_shows_its_text_and_no_figures(replay_run):
    replay_run.steps = []
    info, text, tree, thresholds, nodes = rv.step_outputs(3, replay_run, [("whole text", "model")], [], 5)
    assert "has no steps to replay" in info and "whole text" in text and tree is None and thresholds is None
    assert list(nodes.columns) == list(rv.NODE_COLUMNS) and nodes.empty  # headers, never "1 2 3"


def test_player_stops_at_the_last_step(replay_run):
    assert rv.next_step(replay_run, 0) == 1
    assert rv.next_step(replay_run, None) == 1
    assert rv.next_step(replay_run, 1) is None


def test_tuning_takes_only_the_parameters_of_the_judging_method(replay_run):
    assert rv.judge_of(rv.OWN_RULE) is None and rv.judge_of(None) is None and rv.judge_of("aasd-fixed") == "aasd-fixed"
    defaults = [PARAMS[n].default for n in TUNABLE]  # where aasd takes no such parameter: the default, greyed out
    assert rv.tuning_values(replay_run) == [defaults[0], 0.3, 0.05, defaults[3], defaults[4]]  # TUNABLE order
    values = dict(zip(TUNABLE, [0.01, 0.5, 0.2, 0.1, 3]))
    assert rv.tuned_params("aasd", list(values.values())) == {"alpha": 0.5, "beta": 0.2}
    assert rv.tuned_params("casd", list(values.values())) == {"delta": 0.01}
    # a re-run keeps the run's own parameters the method takes and puts the sliders' values over them
    assert rv.rerun_params(replay_run, "aasd", list(values.values())) == {"alpha": 0.5, "beta": 0.2, "max_nodes": 16}
    assert rv.rerun_params(replay_run, "casd", list(values.values())) == {"delta": 0.01, "max_nodes": 16}
    # a greedy or csd run records top_k = 0 ("no top-k sampling"), below what a user may give: the re-run leaves it
    # to the default instead of passing it back and being refused (the newcomer pass's "top_k = 0 is out of range")
    from workbench.methods import resolve_params

    for method in ("greedy", "csd"):
        recorded = RunTrace(method, {**resolve_params(method), "max_nodes": 16}, "m", None, "cpu", "float32", "p", [1])
        assert recorded.params["top_k"] == 0
        again = rv.rerun_params(recorded, method, [None] * len(TUNABLE))
        assert "top_k" not in again and resolve_params(method, again)["top_k"] == 0
    assert rv.rule_choices()[0] == rv.OWN_RULE and "aasd-fixed" in rv.rule_choices()
    assert rv.slider_range("tau")[0] == 1e-4 and rv.slider_range("lam")[2] == 1


def test_rescore_summary_says_up_to_which_step_the_mal_is_predicted():
    """The predicted MAL covers the steps up to the first change (after it the text would differ): the summary says
    "up to step k" and gives the whole run's MAL beside it (a run of MAL 1.29 read "MAL 2.00 → predicted 3.00")."""
    steps = [SimpleNamespace(step=i) for i in range(10)]
    result = SimpleNamespace(
        method="aasd-fixed",
        first_divergence=4,
        original_mal=2.0,
        predicted_mal=3.0,
        steps=steps,
        window=5,
        run_mal=1.29,
        predicted_is_lower_bound=False,
    )
    text = rv.rescore_summary(result, {"delta": 0.001})
    assert text.startswith("aasd-fixed: δ = 0.001: first change at step 4; MAL up to step 4: 2.00 → predicted **3.00**")
    assert "the whole run's MAL: 1.29" in text
    result.predicted_is_lower_bound = True
    assert "predicted **at least 3.00**" in rv.rescore_summary(result, {"delta": 0.001})
    result.flip_counts = {"accepted→rejected": 1}
    assert rv.rescore_summary(result, {"delta": 0.001}).endswith("; 1 decision flips")  # not "1 decisions flip"
    result.flip_counts = {"accepted→rejected": 2, "rejected→accepted": 1}
    assert rv.rescore_summary(result, {"delta": 0.001}).endswith("; 3 decisions flip")
    result.first_divergence = None
    assert "takes none of" in rv.rescore_summary(
        result, {}
    ) and "no decision changes; predicted MAL = the run's MAL, 1.29" in rv.rescore_summary(result, {})


def test_reasons_name_aasds_threshold_theta_and_corrections_by_their_text():
    from workbench.ui.reasons import readable_reason

    aasd = "p 0.05 < δ 0.2 = min(α·H + β, max p); correction 504"
    assert (
        readable_reason(aasd, {504: " the"}.get) == "p 0.05 < θ 0.2 = min(α·H + β, max p); correction '␣the'"
    )  # whitespace shown as everywhere (core.token_text)
    casd = "p 0.05 ≤ max(δ, p_eos) 0.1"  # CASD's fixed δ keeps its name
    assert readable_reason(casd) == casd


def test_diff_outputs_aligns_two_runs_and_names_where_they_part(replay_run):
    other = RunTrace(
        method="greedy",
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=[0, 1, 5],
        steps=[],
        decode_seconds=1.0,
    )
    a_origins = [(" a", "context"), (" b", "context"), ("!", "model"), ("?", "model")]
    summary, body = diff_outputs(3, other, [("whole", "model")], 7, replay_run, a_origins)
    assert summary.startswith(
        "**first divergence at token 2** (2 equal tokens before it; outlined below): #3 greedy `'⟨5⟩'` (id 5)"
    )
    assert "␣a" in body  # ids the other run recorded read as text
    assert f"#7 {REPLAY_RUN} `'!'` (id 2) at its step 0" in summary
    assert f"aligned: 1 token replaced, 0 only in #3 greedy, 1 only in #7 {REPLAY_RUN}" in summary
    assert body.count('class="pair same"') == 2 and body.count('class="pair differ first"') == 1
    assert body.count('class="pair inserted"') == 1
    assert token_texts(other, [("whole", "model")]) == ["⟨0⟩", "⟨1⟩", "⟨5⟩"]  # no per-token texts: the ids
    assert token_texts(other, [("whole", "model")], {0: " a"}) == [" a", "⟨1⟩", "⟨5⟩"]
    same, _ = diff_outputs(7, replay_run, a_origins, 7, replay_run, a_origins)
    assert same.startswith(f"**identical**: #7 {REPLAY_RUN} and #7 {REPLAY_RUN} emitted the same 4 tokens")


def test_parameter_labels_name_each_parameter_once_with_a_readable_range():
    assert param_label("key_len") == "key_len: default 6, range [1, 32]"  # not "key_len key_len"
    assert param_label("delta").startswith("δ delta: default 0.1, range (")
    assert param_label("seed") == "seed: default 0, any integer ≥ 0"  # not [0, 9223372036854775807]


def test_empty_tables_keep_their_headers():
    assert list(rv.flips_frame(None).columns) == list(rv.FLIP_COLUMNS)
    assert list(rv.nodes_frame_empty().columns) == list(rv.NODE_COLUMNS)


def test_replay_run_id_defaults_to_the_newest_visible_run_or_stays_empty(tmp_path):
    from workbench.store import Store

    store = Store(f"sqlite:///{tmp_path / 'none.db'}")
    assert newest_run_id(runs_frame(store), None) is None  # no runs: empty, the placeholder says why
    import pandas as pd

    frame = pd.DataFrame({"id": [12, 9, 4]})
    assert (
        newest_run_id(frame, None) == 12 and newest_run_id(frame, float("nan")) == 12 and newest_run_id(frame, 0) == 12
    )
    assert newest_run_id(frame, 4) == 4  # a chosen run stays chosen


def test_runs_with_fitted_thresholds_are_named_as_asked_in_the_runs_list_and_the_replay_header(tmp_path, replay_run):
    """The compare column says aasd[auto]; the runs table, the run pickers and the replay header say the same,
    so a run with fitted thresholds can be told from one with the paper's α, β."""
    from dataclasses import replace

    from workbench.store import Store
    from workbench.ui.shared import run_choices

    store = Store(f"sqlite:///{tmp_path / 'fitted.db'}")
    paper = store.save_run(replay_run)
    fitted_run = replace(replay_run, params={**replay_run.params, "fitted": 1})
    fitted = store.save_run(fitted_run)
    methods = dict(zip(runs_frame(store)["id"], runs_frame(store)["method"]))
    # the fit set α, β: only max_nodes is the user's
    assert methods == {paper: REPLAY_RUN, fitted: "aasd[auto,max_nodes=16]"}
    assert dict((i, label) for label, i in run_choices(store))[fitted].startswith(
        f"#{fitted} aasd[auto,max_nodes=16] ·"
    )
    assert rv.step_info(fitted, fitted_run, 0).startswith(f"run #{fitted} · aasd[auto,max_nodes=16] · step 0")
    assert rv.step_info(paper, replay_run, 0).startswith(f"run #{paper} · {REPLAY_RUN} · step 0")


def test_a_lossless_method_that_leaves_greedy_gets_the_flip_mark():
    assert flip_applies("pld", {}, 3) and flip_applies("aasd-strict", {"temperature": 0}, 0)
    assert not flip_applies("aasd", {}, 3)  # relaxed: leaving greedy is its trade, not a flip
    assert not flip_applies("pld", {"temperature": 0.7}, 3)  # sampling: greedy's tokens are not the reference
    assert not flip_applies("pld", {}, None) and not flip_applies("no-such-method", {}, 2)
    mark = flip_mark(3, {"gap": 0.0002, "dtype": "float32", "near_tie": True})
    assert mark["marker_class"] == FLIP_CLASS == "tok-flip"
    assert mark["marker_title"].startswith("a lossless method left greedy's tokens at position 3: logit gap 0.0002")
    assert flip_mark(5, None)["marker_title"].endswith("at position 5")  # without a measurement: the position alone


# ---------------------------------------------------------------- issue 23: compare repeats, memory, analytics (no app)


def test_compare_speed_table_reuses_bench_spread():
    from workbench.evaluation.bench import spread
    from workbench.ui.compare_tab import speed_frame, speed_summary

    summary = speed_summary(
        ["greedy", "pld"],
        [[10.0, 12.0, 11.0], [20.0, 22.0, 21.0]],
        [[1, 1, 1], [2.0, 1.8, 1.9]],
        [[1, 1, 1], [2, 2, 2]],
    )
    s = spread([20.0, 22.0, 21.0])
    frame = speed_frame(summary)
    assert list(frame["runs"]) == [3, 3]
    lo, hi = s["mean"] - s["ci95"], s["mean"] + s["ci95"]  # three runs: the 95 % t-interval (above 0 here)
    assert frame["tok/s"].iloc[1] == f"{s['mean']:.1f} ({lo:.1f}–{hi:.1f})"
    assert frame["speed-up"].iloc[1].startswith("1.90× (")
    one = speed_frame(speed_summary(["greedy"], [[10.0]], [[1.0]], [[1.0]]))
    assert one["tok/s"].iloc[0] == "10.0" and one["speed-up"].iloc[0] == "1.00×"  # one run: no interval to show
    # MAL with two decimals, as the column above the table says it (twelfth pass: greedy's 1.0 showed as "1")
    assert one["MAL"].iloc[0] == "1.00" and list(frame["MAL"]) == ["1.00", "2.00"], list(frame["MAL"])


def test_repeats_are_a_small_whole_number():
    from core.errors import InvalidInputError
    from workbench.ui.compare_tab import MAX_REPEATS, check_repeats

    assert check_repeats(None) == 1 and check_repeats(3) == 3 and check_repeats(3.0) == 3
    for bad in (0, MAX_REPEATS + 1, 2.5, "x"):
        with pytest.raises(InvalidInputError):
            check_repeats(bad)


def test_parameter_fields_follow_the_chosen_methods():
    from workbench.ui.compare_tab import free_text_fields, params_taken

    taken = params_taken(["greedy", "aasd", "csd"])
    assert {"alpha", "beta", "tau", "lam", "gamma"} <= taken and "delta" not in taken
    assert "delta" in params_taken(["casd[delta=0.01]"]) and params_taken(["no-such-method"]) == set()
    assert free_text_fields() == ("", "", 128, True)


def test_analytics_sweeps_what_the_runs_vary_and_shows_shares():
    from workbench.ui.analytics_tab import sweep_param
    from workbench.ui.figures.analytics import accept_by_depth_figure, accept_hist_figure, restyled, shares
    from workbench.ui.shared import run_colors

    runs = [SimpleNamespace(params={"alpha": 0.1, "beta": 0.1}), SimpleNamespace(params={"tau": 0.01, "lam": 6})]
    assert sweep_param("auto", runs) == "alpha"  # the default comparison's aasd: not δ, which no default method takes
    assert sweep_param("auto", runs + [SimpleNamespace(params={"lam": 2})]) == "lam"  # a stored λ sweep
    assert sweep_param("delta", runs) == "delta"
    a = RunTrace(
        method="greedy",
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=[0] * 4,
        steps=[chain_step(0, ["x"], 0)] * 4,
        decode_seconds=1.0,
    )
    b = RunTrace(
        method="aasd",
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=[0] * 3,
        steps=[chain_step(0, [" a", " b", "!"], 1)],
        decode_seconds=1.0,
    )
    pairs = [("#1 greedy", a), ("#2 aasd", b)]
    colors = run_colors([label for label, _ in pairs])
    hist = restyled(shares(accept_hist_figure(pairs)), colors)
    assert [round(sum(t.y), 6) for t in hist.data] == [1.0, 1.0]  # shares of each run's steps, not counts
    depth = restyled(accept_by_depth_figure(pairs), colors)
    assert (
        [t.marker.color for t in hist.data if t.name == "#2 aasd"]
        == [t.marker.color for t in depth.data]
        == [colors["#2 aasd"]]
    )
    # in rows above the plot (not over it), hung from under the title (tests/test_analytics_layout.py draws it)
    assert hist.layout.legend.orientation == "h" and hist.layout.legend.yref == "container"


def test_memory_entries_list_the_rescuing_pairs_first_then_by_count():
    from collections import Counter

    from core.memory import CorrectionMemory
    from workbench.ui.memory_tab import ENTRY_COLUMNS, entries_frame

    memory = CorrectionMemory({(1, 2): 5, (3, 4): 9, (5, 6): 1})
    frame = entries_frame(memory, Counter({(5, 6): 2, (7, 8): 1}), lambda i: f"t{i}", limit=2)
    assert list(frame.columns) == ENTRY_COLUMNS
    # the pairs that rescued first (although not in the top 2), then the top 2 by count
    assert list(frame["count"]) == [1, 0, 9, 5]
    assert list(frame["rescued in the runs"]) == [2, 1, 0, 0] and frame["draft token"].iloc[2] == "t3"


def test_replay_offers_only_rules_that_re_score_and_labels_its_sliders_with_their_range():
    """Issue 23, item 7: sampling methods (T > 0) cannot re-score; a slider's label states the slider's range;
    a slider is live only where the judging method reads its parameter."""
    from core.methods import METHODS

    choices = rv.rule_choices()
    assert "top-k" not in choices and "nucleus" not in choices and "casd" in choices
    assert all(not (METHODS[c].params.get("temperature") or 0) > 0 for c in choices[1:])
    for name in TUNABLE:
        low, high, _ = rv.slider_range(name)
        assert f"slider {low:g}–{high:g}" in rv.slider_label(name)
    assert rv.slider_label("lam").startswith("λ lam: slider 0–50")
    assert rv.tuning_active("csd") == [False, False, False, True, True]  # TUNABLE: δ α β τ λ
    assert rv.tuning_active("aasd") == [False, True, True, False, False]
    assert rv.tuning_active("greedy") == [False] * len(TUNABLE)


# ---------------------------------------------------------------- issue 33: the pure parts behind the browser tests


def test_run_ids_are_whole_numbers_sqlite_can_hold_and_anything_else_is_one_clear_error():
    from core.errors import InvalidInputError
    from workbench.ui.shared import MAX_RUN_ID, parse_run_ids, run_id_of, step_of

    assert [run_id_of(v) for v in (12, 12.0, "12", "#12 aasd · smollm2", " 7 ")] == [12, 12, 12, 12, 7]
    assert run_id_of(MAX_RUN_ID) == MAX_RUN_ID
    for bad in (
        2**63,
        1e308,
        float("nan"),
        float("inf"),
        "1 OR 1=1",
        "1e308",
        0,
        -1,
        True,
        None,
        [1],
        "١٢",
        "²",
        "12.5",
    ):
        with pytest.raises(InvalidInputError, match="is not a run id"):
            run_id_of(bad)
    assert parse_run_ids(["#3 greedy", 4]) == [3, 4] and parse_run_ids(5) == [5]
    with pytest.raises(InvalidInputError):
        parse_run_ids({"a": 1})
    assert step_of(None) == 0 and step_of(3.0) == 3 and step_of(10**30) == MAX_RUN_ID
    for bad in (float("inf"), float("nan"), -1, 2.5, "x", True):
        with pytest.raises(InvalidInputError, match="is not a step"):
            step_of(bad)


def test_the_export_zip_is_named_by_the_ranges_it_holds():
    from workbench.ui.export_tab import zip_name

    assert zip_name(range(11, 20)) == "runs-11-19.zip"  # not runs-11-…-18
    assert zip_name([9, 3, 7, 8]) == "runs-3_7-9.zip"
    assert zip_name([5]) == "runs-5.zip"
    assert zip_name(range(1, 200, 2)) == "runs-1-to-199-100-runs.zip"


def test_speed_bars_never_reach_below_zero_and_carry_their_values_under_the_axis():
    from workbench.ui.figures.compare import repeat_interval as spread
    from workbench.ui.figures.compare import speed_figure

    wild = spread([1.0, 9.0, 0.5])  # an interval wider than the mean
    steady = spread([20.0, 21.0, 20.5])
    fig = speed_figure(
        [("greedy", steady, spread([1, 1, 1]), 1.0), ("aasd", wild, spread([0.1, 0.4, 0.02]), 1.9)],
        {"greedy": "#111111", "aasd": "#222222"},
    )
    bar = fig.data[0]
    assert wild["ci95"] > wild["mean"]
    assert list(bar.error_y.arrayminus) == pytest.approx([steady["ci95"], wild["mean"]])  # stops at 0 tok/s
    assert list(bar.error_y.array) == pytest.approx([steady["ci95"], wild["ci95"]])
    assert bar.text is None and "aasd" in bar.x[1] and "tok/s" in bar.x[1]  # values under the bars, not on them
    assert fig.layout.title.x == 0 and fig.layout.title.yref == "container"  # under Plotly's toolbar


def test_the_prompt_line_states_tokens_and_reading_time_and_warns_when_long():
    from workbench.ui.compare_tab import prompt_note

    assert prompt_note(6814, (45.0, "this server's last prefill"), 3, 8192).startswith(
        "prompt: **6,814 tokens** · reading it"
    )
    assert "≈ **45 s** per method" in prompt_note(6814, (45.0, "x"), 3, 8192)
    assert "⚠ long: ≈ 2.2 min before the last method starts writing" in prompt_note(6814, (45.0, "x"), 3, 8192)
    assert "⚠" not in prompt_note(200, (0.8, "x"), 3, 8192)
    assert "estimated after the first run" in prompt_note(200, None, 1, 8192)
    assert "reads at most 8,192" in prompt_note(9000, None, 1, 8192)


def test_the_status_names_the_method_running_and_its_progress():
    from workbench.service import Progress
    from workbench.ui.compare_tab import running_status

    reading = running_status("aasd", 2, 3, 1, 1, Progress("aasd", [], prefill=(0, 6814)), 64)
    assert reading == "running **aasd** (method 2 of 3): reading the prompt (6,814 tokens)…"
    chunk = running_status("aasd", 2, 3, 1, 1, Progress("aasd", [], prefill=(4096, 6814)), 64)
    assert "4,096 of 6,814 prompt tokens read" in chunk
    step = StepTrace(0, 0, 2, 1, [5, 6], nodes=[])
    writing = running_status("csd", 3, 3, 2, 3, Progress("csd", [step, step]), 64)
    assert writing == "running **csd** (method 3 of 3, pass 2 of 3): 4 of 64 tokens written in 2 steps…"
    one = running_status("csd", 3, 3, 1, 1, Progress("csd", [step]), 64)
    assert one.endswith("2 of 64 tokens written in 1 step…")  # not "1 steps"


def test_the_score_says_what_it_measures():
    from workbench import service
    from workbench.ui.compare_tab import score_label

    tasks = {t.id: t for t in service.sample_tasks()}
    assert score_label(tasks["extract-orders"]) == "F1 against the task's reference answers, 0–100"
    assert score_label(tasks["sum-council"]).startswith("ROUGE-L")


def test_runs_are_coloured_by_their_method():
    from workbench.ui.shared import method_colors, method_of

    assert method_of("#12 aasd") == "aasd" and method_of("#3 csd (2)") == "csd" and method_of("greedy") == "greedy"
    colors = method_colors(["#1 greedy", "#2 aasd", "#3 greedy", "#4 csd", "#5 aasd"])
    assert colors["#1 greedy"] == colors["#3 greedy"] and colors["#2 aasd"] == colors["#5 aasd"]
    assert len(set(colors.values())) == 3


def test_a_sweep_over_one_value_says_so_instead_of_drawing_one_point():
    from workbench.ui.figures.analytics import sweep_figure

    a = RunTrace(
        method="aasd",
        params={"alpha": 0.1},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=[0, 1],
        steps=[chain_step(0, [" a", "!"], 1)],
        decode_seconds=1.0,
    )
    fig = sweep_figure([("#1 aasd", a), ("#2 aasd", a)], "alpha")
    assert (
        not fig.data and "both chosen runs take alpha, each at alpha = 0.1 (aasd ×2)" in fig.layout.annotations[0].text
    )
    b = RunTrace(**{**a.__dict__, "params": {"alpha": 0.3}})
    assert len(sweep_figure([("#1 aasd", a), ("#2 aasd", b)], "alpha").data) == 1


def test_an_output_shows_how_it_ended():
    from workbench.ui.tokens import END_ORIGIN, run_html, token_origins

    steps = [chain_step(0, [" a", " b", "<|im_end|>"], 2)]
    run = RunTrace(
        method="aasd",
        params={"max_new_tokens": 64},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=[0, 1, 99],
        steps=steps,
        decode_seconds=1.0,
        stop_reason="eos",
    )
    assert token_origins(run)[-1] == ("<|im_end|>", END_ORIGIN)
    html_eos = run_html(run)
    assert "&lt;|im_end|&gt;</span>" not in html_eos and "■ end of text" in html_eos and "tok-cut" not in html_eos
    run.stop_reason = "max_new_tokens"
    cut = run_html(run)
    assert "✂ cut at max_new_tokens (64)" in cut and "■ end of text" not in cut


def test_the_model_box_of_a_shared_app_takes_presets_and_hub_ids_only():
    from core.errors import InvalidInputError
    from workbench.service import check_model_access, is_hub_id, not_offered

    assert is_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct") and is_hub_id("Qwen/Qwen2.5-Coder-1.5B")
    for bad in ("/etc", "./m", "~/m", "a/b/c", "../x/y", "x/model.gguf", "a--b/c", "name", "a/../b", "/abs/a"):
        assert not is_hub_id(bad), bad
    check_model_access("smollm2-135m", allow_local=False)
    check_model_access("owner/name", allow_local=False)
    check_model_access("/any/path", allow_local=True)
    answers = set()
    for spec in ("/etc", "/nonexistent", "x.gguf", "./"):
        with pytest.raises(InvalidInputError) as err:
            check_model_access(spec, allow_local=False)
        answers.add(str(err.value).replace(repr(spec), "<spec>"))
    assert answers == {str(not_offered("SPEC")).replace("'SPEC'", "<spec>")}


def test_api_values_of_the_wrong_kind_are_refused_by_name():
    from core.errors import InvalidInputError
    from workbench.ui.compare_tab import PARAM_FIELDS, CompareRequest

    def request(**kw):
        base = dict(
            model="smollm2-135m",
            draft="",
            methods=["greedy"],
            prompt="hi",
            context="",
            chat=True,
            max_new_tokens=8,
            params=dict.fromkeys(PARAM_FIELDS),
            task_choice=None,
            uploaded=None,
            compress_rate=1,
            compressor="selfinfo",
            repeats=1,
        )
        return CompareRequest(**{**base, **kw})

    assert request().checked().draft is None
    for kw, field in (
        (dict(model=3), "the model"),
        (dict(methods=True), "methods"),
        (dict(prompt=["x"]), "the prompt"),
        (dict(chat="yes"), "use_chat"),
        (dict(params={**dict.fromkeys(PARAM_FIELDS), "delta": "0.1"}), "delta"),
    ):
        with pytest.raises(InvalidInputError, match=field):
            request(**kw).checked()


@real_model
def test_the_default_sample_holds_spans_worth_copying(smollm2):
    """The first bundled sample (the Compare tab opens on it) is an extraction whose answer copies its context: AASD
    with a fixed 16-node tree (not sized from this machine's timing) emits ≥ 1.5 tokens per step there, most of them
    copied. (The old first sample, a short QA, left AASD slower than greedy and showed nothing to copy.)"""
    from core.methods import run_method
    from core.models import encode_prompt
    from core.stats import run_metrics
    from workbench import service

    task = service.sample_tasks()[0]
    assert task.id == "extract-orders"
    ids = encode_prompt(smollm2.tokenizer, f"{task.context}\n\n{task.input}")
    run = run_method(
        "aasd", smollm2, ids, {"max_new_tokens": 64, "max_nodes": 16}, prompt_text=task.input, context=task.context
    )
    copied = sum(n.decision == "accepted" and n.source in ("context", "alignment") for s in run.steps for n in s.nodes)
    assert run_metrics(run)["mal"] >= 1.5 and copied >= 0.3 * len(run.output_ids), (run_metrics(run)["mal"], copied)


def test_the_speed_note_prices_trees_with_the_measured_cost_curve(monkeypatch):
    import torch

    from core.sizing import CostCurve
    from workbench import service

    curve = CostCurve((0, 4, 16, 64), (0.05, 0.06, 0.10, 0.30))
    monkeypatch.setattr(service, "cached_curve", lambda target, length=None: curve)
    target = SimpleNamespace(device=torch.device("cpu"))
    note = service.speed_note(
        target,
        {"greedy": 0.0, "aasd": 4.0, "csd": 0.4, "pld": 0.0},
        {"greedy": 1.0, "aasd": 2.4, "csd": 1.3, "pld": 1.0},
    )
    assert note.startswith("Estimated speed-ups on this CPU")
    assert "a forward that verifies 16 draft tokens takes 2.0× as long as a greedy step here (t(16)/t(0)" in note
    assert "aasd: trees of 4 nodes on average take 1.2× a greedy step, MAL 2.40 → an estimated ≈ 2.00× greedy" in note
    # a tree under one node a step is priced, not called "almost nothing" (the twenty-second pass: MAL 1.88 beside it)
    assert (
        "csd: trees of 0.4 nodes on average (larger ones cost more here than they were expected to gain) take 1.0× "
        "a greedy step, MAL 1.30 → an estimated ≈ 1.27× greedy" in note
    )
    assert "pld drafted nothing" in note and "greedy:" not in note and "greedy drafted" not in note  # by design
    assert note.endswith("approach their MAL.") and "pulls a measured speed-up below it" in note
    # a measured speed-up above the MAL (csd measured 4.11× at MAL 2.22 in the newcomer pass) is called noise
    sizes, mals = {"aasd": 4.0, "csd": 3.0}, {"aasd": 2.4, "csd": 2.22}
    noisy = service.speed_note(target, sizes, mals, measured={"aasd": 1.9, "csd": 4.11})
    assert (
        "other work slowed the greedy pass (csd measured 4.11× with MAL 2.22)" in noisy and "aasd measured" not in noisy
    )
    assert "slowed" not in service.speed_note(target, sizes, mals, measured={"aasd": 1.9, "csd": 2.0})
    # after three passes the table above has the intervals: the note points at them instead of asking for Repeats
    three = service.speed_note(target, sizes, mals, measured={"csd": 4.11}, measured_passes=3)
    assert "see the intervals above" in three and "run with Repeats" not in three and "run with Repeats" in noisy
    monkeypatch.setattr(service, "cached_curve", lambda target, length=None: None)
    assert service.speed_note(target, {"aasd": 4.0}, {"aasd": 2.4}) is None  # no curve measured here: no claim


HOSTILE_IDS = (2**63, 2**70, 1e308, "1 OR 1=1", "9223372036854775808", -1)


@real_model
def test_hostile_run_ids_through_the_http_api_come_back_as_one_clear_line(app, capfd):
    """Issue 30 item 19, over HTTP as a client sends them: run ids ≥ 2⁶³, 1e308 and "1 OR 1=1" to every endpoint
    that takes a run id (text in a number box too: workbench.ui.components.lenient) are a readable message, never a logged
    traceback; so are text, inf and nan in /compare's number fields."""
    from gradio_client.exceptions import AppError

    _, client = app
    calls = [
        ("/load_run", lambda v: (v,)),
        ("/replay_step", lambda v: (v, 0)),
        ("/share_run", lambda v: (v,)),
        ("/diff", lambda v: (v, v)),
        ("/memory", lambda v: ([v],)),
        ("/export", lambda v: ([v],)),
    ]
    capfd.readouterr()
    for bad in HOSTILE_IDS[:3]:  # the run's figures, secondary to /load_run (which says why): none drawn
        assert all(o is None for o in client.predict(bad, api_name="/run_figures")), bad
    for api, args in calls:
        for bad in HOSTILE_IDS:
            try:
                out = client.predict(*args(bad), api_name=api)
            except AppError as e:  # the handler raised a gr.Error: its message is the line the page shows
                message = str(e)
            else:
                out = out if isinstance(out, (list, tuple)) else [out]
                message = next((o for o in out if isinstance(o, str) and ("run" in o or "⚠" in o)), None)
            assert message and "\n" not in message.strip() and "Traceback" not in message, (api, bad, message)
            assert (
                "OverflowError" not in message
                and "is not a run id" in message
                or "not found" in message
                or "no run" in message
            ), (api, bad, message)
    for field, bad in (("max_nodes", "1 OR 1=1"), ("repeats", "inf"), ("alpha", "nan"), ("max_new_tokens", "x")):
        status = client.predict(model_name="smollm2-135m", method_list=["greedy"], **{field: bad}, api_name="/compare")[
            0
        ]
        assert status.startswith("**⚠") and "\n" not in status.strip(), (field, status)
    logged = capfd.readouterr()
    assert "Traceback" not in logged.err and "OverflowError" not in logged.err, logged.err[-2000:]


def test_the_diff_outlines_one_cell_when_an_insertion_comes_before_the_shifted_rest():
    """B inserts a token at the first divergence and then goes on as A did: the insertion (B's token j) is the
    one outlined cell, not also A's token j one cell later."""
    from workbench.ui.tokens import token_diff_html

    body = token_diff_html(list("abcdef"), list("abXcdef"), 2)
    assert body.count(' first"') == 1 and 'class="pair inserted first"' in body


def test_a_column_says_when_csd_drafts_from_the_context_for_want_of_a_draft_model():
    from workbench.ui.compare_tab import column_notes

    assert column_notes("csd", "").startswith(
        "*no draft model: drafts from the prompt's context and its own output so far (as AASD does)*"
    )
    assert column_notes("csd[lam=2]", None).startswith("*no draft model")
    assert "no draft model" not in column_notes("csd", "qwen2.5-coder-0.5b")  # with a draft model: the paper's CSD
    assert column_notes("aasd", "") == "" and column_notes("greedy", "") == ""


def test_the_end_and_cut_marks_use_glyphs_debians_default_fonts_have():
    """⏹ (U+23F9) is in no font Debian installs by default and drew as a tofu box; the marks must be in
    DejaVu Sans or Liberation Sans (what Debian's Chromium falls back to)."""
    import shutil
    import subprocess

    from workbench.ui.tokens import END_TEXT

    if not shutil.which("fc-list"):
        pytest.skip("fc-list (fontconfig) not installed")
    families = subprocess.run(["fc-list", ":", "family"], capture_output=True, text=True).stdout
    if "DejaVu Sans" not in families and "Liberation Sans" not in families:
        pytest.skip("neither DejaVu Sans nor Liberation Sans is installed")
    for ch in {c for c in END_TEXT + "✂" if ord(c) > 127}:
        covering = subprocess.run(["fc-list", f":charset={ord(ch):x}", "family"], capture_output=True, text=True).stdout
        assert "DejaVu Sans" in covering or "Liberation Sans" in covering, f"{ch!r} (U+{ord(ch):04X}) has no font"


def test_fitted_methods_grey_out_the_thresholds_they_read_from_their_fit_and_labels_say_what_0_means():
    from workbench.ui.compare_tab import params_taken
    from workbench.ui.shared import param_label

    assert {"alpha", "beta"} <= params_taken(["greedy", "aasd", "csd"])
    assert not {"alpha", "beta"} & params_taken(["greedy", "aasd[auto]", "csd"])  # refused beside the fit at Run
    assert {"alpha", "beta"} <= params_taken(["aasd[auto]", "aasd"])  # another method in the list still reads them
    assert param_label("max_nodes") == "max_nodes: default 0, range [0, 256]; 0 = auto"
