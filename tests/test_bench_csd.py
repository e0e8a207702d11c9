"""benchmarks/bench_csd.py resumes: a run stopped part-way and rerun gives the rows and memories an uninterrupted run gives."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT

from core.memory import CorrectionMemory
from workbench.evaluation.bench import Checkpoint

PROMPTS = [
    "Repeat this list exactly, twice: apples, pears, plums, figs, dates, limes.",
    "Copy the sentence three times: the cat sat on the mat by the door.",
    "Write the numbers from one to twelve in words, separated by commas.",
]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_csd", ROOT / "benchmarks" / "bench_csd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.real_model
@pytest.mark.slow
def test_a_stopped_bench_csd_run_resumes_to_the_same_rows_and_memories(smollm2, tmp_path):
    bench = load_bench()
    items = [
        bench.Item(f"p{k}", "rag", text, True, (), lambda out: float(len(out)), 24) for k, text in enumerate(PROMPTS)
    ]
    methods = ["greedy", "csd[lam=1,max_nodes=16]"]  # fixed trees: under max_nodes=auto a steep machine drafts none
    calibrated = CorrectionMemory()
    with Checkpoint(tmp_path / "whole.jsonl", {}) as ck:
        whole = bench.run_suite(smollm2, None, items, methods, calibrated, ck, progress=False)
    with Checkpoint(tmp_path / "parts.jsonl", {}) as ck:  # stopped after two items
        first = bench.run_suite(smollm2, None, items[:2], methods, calibrated, ck, progress=False)
    with Checkpoint(tmp_path / "parts.jsonl", {}) as ck:
        resumed = bench.run_suite(smollm2, None, items, methods, calibrated, ck, progress=False)

    assert len(calibrated) == 0  # each method learns in a private copy
    assert first["memory_after"][methods[1]]["observations"] > 0  # so the resumed copy had updates to replay
    rows = lambda result: [(r["id"], r["method"], r["token_ids"], r["memory_updates"]) for r in result["tasks"]]
    assert rows(resumed) == rows(whole)
    assert resumed["memory_after"] == whole["memory_after"]
    for key in ("mal", "accept_rate", "rescued_share", "tokens", "score"):
        assert resumed["methods"][methods[1]][key] == whole["methods"][methods[1]][key]


def test_the_pair_report_passes_and_misses_each_target_on_the_right_side_of_its_threshold():
    bench = load_bench()
    row = lambda accept, tps, score: {
        "accept_rate": accept,
        "tps": tps,
        "score": score,
        "mal": 2.0,
        "phases_ms": {"draft_ms": 1.0, "forward_ms": 2.0, "verify_ms": 0.5, "bookkeeping_ms": 0.5},
    }
    summary = {
        "greedy": row(None, 1.0, 60.0),
        "sd": row(0.70, 2.0, 60.0),
        "hf-assisted": row(None, 2.1, 60.0),
        "csd": row(0.81, 2.3, 59.0),
    }
    by_kind = {"gsm8k": {"greedy": {"score": 50.0}, "csd": {"score": 45.0}}}
    lines, ok = bench.report_pair(summary, "sd == greedy on 2/2", by_kind, {"gsm8k": 20}, {"lam>=6": 0.25})
    verdicts = {line.split(":")[0] for line in lines if line.startswith(("PASS", "MISS"))}
    assert verdicts == {
        "PASS csd acceptance ≥ sd + 5 points",
        "PASS csd tokens/s ≥ 1.05 × sd",
        "MISS sd tokens/s ≥ 1.1 × hf-assisted",
        "PASS csd gsm8k accuracy within one item of greedy",
        "PASS memory covers ≥ 20 % of sd's rejections at λ = 6",
    }
    assert not ok
    summary["hf-assisted"]["tps"] = 1.8
    by_kind["gsm8k"]["csd"]["score"] = 40.0  # two of 20 items
    lines, ok = bench.report_pair(summary, "", by_kind, {"gsm8k": 20}, {"lam>=6": 0.05})
    verdicts = {line.split(":")[0] for line in lines if line.startswith(("PASS", "MISS"))}
    assert {
        "MISS csd gsm8k accuracy within one item of greedy",
        "MISS memory covers ≥ 20 % of sd's rejections at λ = 6",
        "PASS sd tokens/s ≥ 1.1 × hf-assisted",
    } <= verdicts and not ok
    assert any("per token 2.0 ms" in line for line in lines)  # (1 + 2 + 0.5 + 0.5) ms / MAL 2
