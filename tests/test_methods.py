"""Methods, parameters, task files and the bench runner on a tiny random model."""

from __future__ import annotations

import json
import random

import pytest

from core.errors import InvalidInputError
from core.methods import METHODS, resolve_params, run_method
from core.stats import run_metrics
from workbench.evaluation.bench import format_table, run_bench
from workbench.evaluation.tasks import Task, load_tasks


def test_every_issue_method_is_registered():
    for name in ["greedy", "pld", "top-k", "nucleus", "beam", "hf-generate", "hf-prompt-lookup"]:
        assert name in METHODS


def test_params_defaults_overrides_and_errors():
    assert resolve_params("top-k")["top_k"] == 50
    assert resolve_params("nucleus")["top_p"] == 0.8
    assert resolve_params("greedy", {"max_new_tokens": 7})["max_new_tokens"] == 7
    with pytest.raises(InvalidInputError, match="unknown method 'nope'"):
        resolve_params("nope")
    with pytest.raises(InvalidInputError, match="max_new_tokens = 0 is out of range"):
        resolve_params("greedy", {"max_new_tokens": 0})
    with pytest.raises(InvalidInputError, match="unknown parameter 'deltaa'"):
        resolve_params("greedy", {"deltaa": 0.1})
    with pytest.raises(InvalidInputError, match="no effect on greedy"):
        resolve_params("greedy", {"delta": 0.1})
    with pytest.raises(InvalidInputError, match="must be an integer"):
        resolve_params("greedy", {"max_new_tokens": 2.5})
    with pytest.raises(InvalidInputError, match="top_p = 0"):
        resolve_params("nucleus", {"top_p": 0})


def test_reference_baselines_and_engine_agree(tiny):
    prompt = [5, 9, 14, 5, 9, 22, 31, 5, 9]
    ours = run_method("greedy", tiny, prompt, {"max_new_tokens": 24})
    hf = run_method("hf-generate", tiny, prompt, {"max_new_tokens": 24})
    hf_pl = run_method("hf-prompt-lookup", tiny, prompt, {"max_new_tokens": 24})
    assert ours.output_ids == hf.output_ids == hf_pl.output_ids
    assert ours.status == hf.status == "complete"
    m = run_metrics(ours)
    assert m["mal"] == 1.0 and m["steps"] == 24 and m["tokens"] == 24 and m["tps"] > 0
    assert run_metrics(hf)["mal"] == 1.0  # one token per forward, seen through the streamer
    beam = run_method("beam", tiny, prompt, {"max_new_tokens": 8, "num_beams": 3})
    assert len(beam.output_ids) == 8


def test_sampling_methods_are_seeded(tiny):
    prompt = [3, 4, 5]
    a = run_method("top-k", tiny, prompt, {"max_new_tokens": 16, "seed": 1})
    b = run_method("top-k", tiny, prompt, {"max_new_tokens": 16, "seed": 1})
    c = run_method("nucleus", tiny, prompt, {"max_new_tokens": 16, "seed": 2})
    assert a.output_ids == b.output_ids
    others = {
        tuple(run_method("top-k", tiny, prompt, {"max_new_tokens": 16, "seed": s}).output_ids) for s in range(2, 6)
    }
    assert len(others | {tuple(a.output_ids)}) > 1  # the seed matters: it really samples
    assert 1 <= len(c.output_ids) <= 16 and c.stop_reason in ("eos", "max_new_tokens")


def test_cancel_keeps_what_was_decoded(tiny):
    seen = []
    run = run_method(
        "greedy", tiny, [3, 4, 5], {"max_new_tokens": 30}, on_step=seen.append, should_stop=lambda: len(seen) >= 5
    )
    assert run.status == "cancelled" and run.stop_reason == "cancelled"
    assert len(run.output_ids) == 5 and len(run.steps) == 5


def test_run_method_refuses_bad_prompts(tiny):
    with pytest.raises(InvalidInputError, match="empty"):
        run_method("hf-generate", tiny, [], {})
    with pytest.raises(InvalidInputError, match="the model reads at most 512"):
        run_method("greedy", tiny, [3] * 600, {})
    with pytest.raises(InvalidInputError, match="needs a draft model"):
        run_method("hf-assisted", tiny, [3, 4], {})


def test_task_files(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text(
        json.dumps({"id": "a", "task": "qa", "input": "Q?", "context": "C.", "answers": ["x"]})
        + "\n\n"
        + json.dumps(
            {"id": "b", "task": "code", "input": "", "context": "def f():", "template": "Complete: {context}{input}"}
        )
        + "\n"
    )
    tasks = load_tasks(good)
    assert [t.id for t in tasks] == ["a", "b"]
    assert tasks[0].prompt() == "C.\n\nQ?" and tasks[1].prompt() == "Complete: def f():"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"id": "a", "task": "qa", "input": "Q"}) + "\n" + json.dumps({"id": "b", "input": "Q"}) + "\n"
    )
    with pytest.raises(InvalidInputError, match="bad.jsonl line 2: missing field\\(s\\) task"):
        load_tasks(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(InvalidInputError, match="line 1: not valid JSON"):
        load_tasks(broken)
    with pytest.raises(InvalidInputError, match="not found"):
        load_tasks(tmp_path / "missing.jsonl")
    with pytest.raises(InvalidInputError, match="unknown category nope"):
        load_tasks(good, categories=["nope"])


def test_spec_bench_rows_and_bundled_samples(spec_bench):
    from conftest import ROOT

    tasks = load_tasks(spec_bench, categories=["summarization", "rag"], limit=3)
    assert [t.category for t in tasks] == ["summarization"] * 3 + ["rag"] * 3
    assert all(t.answers for t in tasks) and tasks[3].task == "qa"
    samples = load_tasks(ROOT / "assets" / "samples.jsonl")
    assert {t.task for t in samples} >= {"qa", "summarization", "code"}


def test_bench_interleaves_and_summarises(tiny, monkeypatch):
    import workbench.evaluation.bench as bench

    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:40])
    tasks = [Task(id=str(i), task="chat", input=f"abc abc {i} abc") for i in range(3)]
    order = []
    result = run_bench(
        tiny,
        tasks,
        ["pld", "hf-generate"],
        {"max_new_tokens": 12},
        on_run=lambda t, r: order.append((t.id, r.method)),
        progress=False,
    )
    assert order[:3] == [("0", "greedy"), ("0", "pld"), ("0", "hf-generate")]
    assert set(result["methods"]) == {"greedy", "pld", "hf-generate"}
    assert result["methods"]["greedy"]["speedup"] == pytest.approx(1.0)
    texts = {}
    for row in result["tasks"]:
        texts.setdefault(row["id"], set()).add(tuple(row["token_ids"]))
    assert all(len(v) == 1 for v in texts.values())  # every method wrote the same tokens on every task
    assert "| pld |" in format_table(result["methods"])


def test_repeats_report_the_spread_of_speed_and_batches_keep_task_order(tiny, monkeypatch):
    import workbench.evaluation.bench as bench

    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:40])
    tasks = [Task(id=str(i), task="chat", input=f"abc abc {i} abc") for i in range(3)]
    result = bench.repeat_bench(tiny, tasks, ["pld"], {"max_new_tokens": 12}, repeats=3, progress=False)
    assert len(result["tasks"]) == 3 * 3 * 2 and {r["repeat"] for r in result["tasks"]} == {0, 1, 2}
    spread = result["methods"]["pld"]["speedup_spread"]
    assert spread["n"] == 3 and spread["sd"] >= 0 and spread["ci95"] == pytest.approx(4.303 * spread["sd"] / 3**0.5)
    assert result["methods"]["greedy"]["speedup_spread"]["mean"] == pytest.approx(1.0)
    assert "speedup_ci95" in format_table(result["methods"])
    once = bench.repeat_bench(tiny, tasks[:1], ["pld"], {"max_new_tokens": 4}, repeats=1, progress=False)
    assert "speedup_ci95" not in format_table(once["methods"])  # one pass has no spread to show
    assert bench.spread([2.0]) == {"mean": 2.0, "sd": 0.0, "ci95": None, "n": 1}
    batched = bench.run_bench(tiny, tasks, ["pld"], {"max_new_tokens": 12}, batch_size=2, progress=False)
    single = bench.run_bench(tiny, tasks, ["pld"], {"max_new_tokens": 12}, progress=False)
    key = lambda rows: [(r["id"], r["method"], r["token_ids"]) for r in rows]  # noqa: E731
    assert key(batched["tasks"]) == key(single["tasks"])  # same rows, same order, same tokens (float32)
    assert all(r["batch_size"] == 2 for r in batched["tasks"] if r["id"] != "2")


def test_method_specs_carry_their_own_overrides():
    from core.errors import InvalidInputError
    from core.methods import parse_method_spec, resolve_params, split_method_list

    assert split_method_list("greedy, aasd[align_graft=1,alpha=0.2],pld") == [
        "greedy",
        "aasd[align_graft=1,alpha=0.2]",
        "pld",
    ]
    name, over = parse_method_spec("aasd[align_graft=1,alpha=0.2]")
    assert (
        name == "aasd" and resolve_params(name, over)["alpha"] == 0.2 and resolve_params(name, over)["align_graft"] == 1
    )
    for bad in ["nope", "aasd[alpha]", "aasd[alpha=0.2", "greedy[delta=0.1]"]:
        with pytest.raises(InvalidInputError):
            name, over = parse_method_spec(bad)
            resolve_params(name, over)
    with pytest.raises(InvalidInputError, match="out of range"):
        resolve_params("aasd", {"align_graft": 2})


def test_one_token_prompts_run_with_every_context_method(tiny):
    """Nothing precedes the pending token: the prefill keeps no predictions, alignment has nothing to add."""
    want = run_method("greedy", tiny, [7], {"max_new_tokens": 5}).output_ids
    for name in ("casd", "aasd", "aasd-strict"):
        run = run_method(name, tiny, [7], {"max_new_tokens": 5})
        assert run.status == "complete" and len(run.output_ids) == 5
    assert run.output_ids == want  # aasd-strict is lossless


@pytest.mark.real_model
def test_hf_baselines_honour_stop_strings_with_an_assistant(smollm2):
    """transformers' assisted generation used to fail on stop strings (its assistant got no tokenizer)."""
    from core.models import encode_prompt

    ids = encode_prompt(smollm2.tokenizer, "List three colours, one per line.")
    full = run_method("hf-generate", smollm2, ids, {"max_new_tokens": 40})
    assert full.output_text.count("\n") >= 2  # otherwise this prompt cannot show a stop
    stop = "\n"
    runs = [
        run_method(
            m, smollm2, ids, {"max_new_tokens": 40}, draft=smollm2 if m == "hf-assisted" else None, stop_strings=[stop]
        )
        for m in ("hf-generate", "hf-assisted", "greedy")
    ]
    for run in runs:
        assert run.output_text.endswith(stop) and run.output_text.count(stop) == 1
    assert runs[0].output_ids == runs[1].output_ids == runs[2].output_ids


@pytest.mark.real_model
def test_a_stop_string_inside_a_multi_token_step_stops_transformers_baselines(smollm2):
    """Assisted generation and prompt lookup add several tokens per step; transformers' StopStringCriteria
    looks only at the sequence's end, so they ran on past a stop string in the middle of a chunk."""
    import torch
    from transformers import StopStringCriteria

    from core.step import stop_string_end
    from workbench.evaluation.hf_baselines import StopStringAnywhere

    tok, stops = smollm2.tokenizer, ["\ndef "]
    prompt, gen = tok.encode("Write code:"), tok.encode("    return 1\ndef helper(x):\n    pass")
    end = stop_string_end(tok, gen, stops)
    assert end is not None and end < len(gen)
    assert "\ndef " in tok.decode(gen[:end]) and "\ndef " not in tok.decode(gen[: end - 1])
    chunk = torch.tensor([prompt + gen])  # the stop string sits inside the step's tokens, not at their end
    assert not bool(StopStringCriteria(tok, stops)(chunk, None)[0])  # why ours exists
    assert bool(StopStringAnywhere(tok, len(prompt), stops)(chunk, None)[0])
    before = StopStringAnywhere(tok, len(prompt), stops)
    assert not bool(before(torch.tensor([prompt + gen[: end - 1]]), None)[0])
    assert stop_string_end(tok, gen[: end - 1], stops) is None


def test_per_source_acceptance_is_one_number_in_bench_run_metrics_and_the_ui(tiny):
    """accepted ÷ verified nodes of a source (core.stats.acceptance_by), the same in bench's JSON, a run's
    metrics (what the store keeps) and the UI's per-source plot; unreached nodes do not count."""
    from core.stats import acceptance_by, pool, run_totals
    from workbench.ui.figures.analytics import accept_by_source_figure

    rng = random.Random(3)
    prompts = []
    for _ in range(2):
        words = [rng.randrange(2, 96) for _ in range(12)]
        prompts.append(words * 2 + [rng.randrange(2, 96) for _ in range(3)] + words[:4])
    runs = [
        run_method("aasd", tiny, p, {"max_new_tokens": 24, "alpha": 0.0, "beta": 0.02, "max_nodes": 16})
        for p in prompts
    ]
    pooled: dict = {}
    for run in runs:
        for source, (a, n) in acceptance_by(run, lambda node: node.source).items():
            pooled.setdefault(source, [0, 0])
            pooled[source][0] += a
            pooled[source][1] += n
    unreached = sum(n.decision == "unreached" for r in runs for s in r.steps for n in s.nodes)
    assert unreached and pooled  # there are unreached nodes to leave out
    summary = pool([run_totals(r) for r in runs])  # what bench's JSON reports per method
    assert summary["accept_rate_by_source"] == {k: a / n for k, (a, n) in sorted(pooled.items())}
    for run in runs:
        by_source = run_metrics(run)["accept_rate_by_source"]
        fig = accept_by_source_figure([run])
        bars = {x: y for trace in fig.data for x, y in zip(trace.x, trace.y)}
        assert by_source == {k: a / n for k, (a, n) in acceptance_by(run, lambda node: node.source).items()}
        assert bars == pytest.approx(by_source)


def test_parameters_must_be_finite_numbers():
    """NaN passes every range comparison and would be stored as invalid JSON; inf is no setting either."""
    for value in ("nan", float("nan"), "inf", float("-inf")):
        with pytest.raises(InvalidInputError, match="temperature must be a finite number"):
            resolve_params("greedy", {"temperature": value})
    assert (
        resolve_params("aasd", {"fallback": "recycle"})["fallback"] == 1
    )  # words for values where a parameter names them


def test_bench_progress_names_the_run_under_way(tiny, monkeypatch):
    """A newcomer watching `run.sh table` saw the bar name the run that had just finished ("1/8 … extract-orders
    greedy" while pld decoded) and nothing during the first: the label is set before each run."""
    import tqdm.auto

    from workbench.evaluation import bench

    labels: list[str] = []
    bars = []

    class Bar(tqdm.auto.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **{**k, "disable": True})
            bars.append(self)

        def set_postfix_str(self, s="", refresh=True):
            self.label = s

    real_run = bench.run_method

    def run_method(name, *a, **k):
        labels.append(getattr(bars[-1], "label", "") if bars else "(warm-up: no bar yet)")
        return real_run(name, *a, **k)

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    monkeypatch.setattr(bench, "run_method", run_method)
    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:40])
    tasks = [Task(id=f"t{i}", task="chat", input=f"abc abc {i} abc") for i in range(2)]
    bench.run_bench(tiny, tasks, ["pld"], {"max_new_tokens": 4}, progress=True)
    timed = labels[-4:]  # after the warm-up calls, which run before the bar exists
    assert timed == ["t0 greedy", "t0 pld", "t1 greedy", "t1 pld"], labels
