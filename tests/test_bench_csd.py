"""benchmarks/bench_csd.py resumes: a run stopped part-way and rerun gives the rows and memories an uninterrupted run gives."""
from __future__ import annotations

import importlib.util

import pytest

from conftest import ROOT
from core.bench import Checkpoint
from core.memory import CorrectionMemory

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
def test_a_stopped_bench_csd_run_resumes_to_the_same_rows_and_memories(smollm2, tmp_path):
    bench = load_bench()
    items = [bench.Item(f"p{k}", "rag", text, True, (), lambda out: float(len(out)), 24) for k, text in enumerate(PROMPTS)]
    methods = ["greedy", "csd[lam=1]"]
    calibrated = CorrectionMemory()
    with Checkpoint(tmp_path / "whole.jsonl", {}) as ck:
        whole = bench.run_suite(smollm2, None, items, methods, calibrated, ck, progress=False)
    with Checkpoint(tmp_path / "parts.jsonl", {}) as ck:  # stopped after two items
        first = bench.run_suite(smollm2, None, items[:2], methods, calibrated, ck, progress=False)
    with Checkpoint(tmp_path / "parts.jsonl", {}) as ck:
        resumed = bench.run_suite(smollm2, None, items, methods, calibrated, ck, progress=False)

    assert len(calibrated) == 0  # each method learns in a private copy
    assert first["memory_after"]["csd[lam=1]"]["observations"] > 0  # so the resumed copy had updates to replay
    rows = lambda result: [(r["id"], r["method"], r["token_ids"], r["memory_updates"]) for r in result["tasks"]]
    assert rows(resumed) == rows(whole)
    assert resumed["memory_after"] == whole["memory_after"]
    for key in ("mal", "accept_rate", "rescued_share", "tokens", "score"):
        assert resumed["methods"]["csd[lam=1]"][key] == whole["methods"]["csd[lam=1]"][key]
