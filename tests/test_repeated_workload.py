"""The repeated workload (benchmarks/repeated_workload.py): every request twice, round 2 in a new order after
all of round 1, code edits showing round 1's output; and the benchmark's summary per round."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import SPEC_BENCH

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_suffix  # noqa: E402
import repeated_workload as rw  # noqa: E402


@pytest.fixture
def rows():
    if not SPEC_BENCH.is_file():
        pytest.skip("Spec-Bench's question.jsonl is not beside the project")
    return rw.build_workload(SPEC_BENCH, per_category=2, code=4, seed=3)


def test_every_request_comes_twice_round_two_after_round_one_in_a_new_order(rows):
    first = [r for r in rows if r["round"] == 1]
    second = [r for r in rows if r["round"] == 2]
    assert rows == first + second and len(first) == len(second) == 13 * 2 + 4
    assert sorted(r["item"] for r in first) == sorted(r["item"] for r in second)
    assert [r["item"] for r in first] != [r["item"] for r in second]  # a new random order
    assert len({r["id"] for r in rows}) == len(rows)
    again = rw.build_workload(SPEC_BENCH, per_category=2, code=4, seed=3)
    assert again == rows  # the seed fixes the orders
    spec = {r["item"]: r["input"] for r in first if r["category"] != "code-edit"}
    assert all(r["input"] == spec[r["item"]] for r in second if r["category"] != "code-edit")


def test_code_edits_ask_a_change_to_the_first_output(rows):
    edits = [r for r in rows if r["category"] == "code-edit"]
    assert {r["round"] for r in edits} == {1, 2} and len(edits) == 8
    for r in edits:
        if r["round"] == 1:
            assert "def " in r["input"] and '"""' in r["input"]
        else:
            assert r["follows"] == r["item"] + "@1" and "{previous}" in r["input"]
            with pytest.raises(ValueError, match="has not run yet"):
                rw.prompt_of(r, {})
            assert rw.prompt_of(r, {r["follows"]: "def f(): pass"}).startswith(
                "Here is a Python function:\n\ndef f(): pass"
            )


def test_the_summary_pools_each_round_against_greedy_of_that_round():
    def row(i, m, rnd, seconds, ids=(1, 2, 3, 4)):
        return {
            "id": f"x{i}",
            "round": rnd,
            "method": m,
            "token_ids": list(ids),
            "tokens": 4,
            "steps": 2 if m != "greedy" else 4,
            "decoded": 4,
            "decode_seconds": seconds,
            "prefill_seconds": 0.0,
            "drafted": 4,
            "accepted": 2,
            "rescued": 0,
            "timed_steps": 2,
            "by_source": {"history": [2, 4]} if m == "suffix" else {},
            "by_position": {},
        }

    rows = [
        row(0, "greedy", 1, 1.0),
        row(0, "suffix", 1, 1.0),
        row(1, "greedy", 2, 1.0),
        row(1, "suffix", 2, 0.25, ids=(1, 2, 9)),
    ]
    by = bench_suffix.summarise(rows, ["greedy", "suffix"])
    assert by["round 1"]["suffix"]["speedup"] == 1.0 and by["round 2"]["suffix"]["speedup"] == 4.0
    assert by["round 2"]["suffix"]["mal"] == 2.0 and by["round 2"]["suffix"]["equal_to_greedy"] == "0/1"
    assert by["overall"]["suffix"]["accept_rate_by_source"] == {"history": 0.5}
    met = {what: ok for what, _, _, ok in bench_suffix.targets(by)}
    assert met["suffix / greedy on round 2"] is True
    assert by["overall"]["suffix"]["cpu_speedup"] is None  # rows without CPU times: none claimed
    for r in rows:  # CPU time of decoding: suffix's round-2 row took a third of greedy's
        r["cpu_seconds"] = 0.3 if (r["method"], r["round"]) == ("suffix", 2) else 0.9
    by = bench_suffix.summarise(rows, ["greedy", "suffix"])
    assert by["round 2"]["suffix"]["cpu_speedup"] == pytest.approx(3.0)
    assert by["round 1"]["suffix"]["cpu_speedup"] == pytest.approx(1.0)
    cpu = {what: value for what, value, _, _ in bench_suffix.targets(by, "cpu_speedup")}
    assert cpu["suffix / greedy on round 2"] == pytest.approx(3.0)


def test_code_edits_can_start_after_a_reported_runs_items(rows):
    held_out = rw.build_workload(SPEC_BENCH, per_category=0, code=3, seed=3, code_offset=3)
    reported = rw.build_workload(SPEC_BENCH, per_category=0, code=3, seed=3)
    assert {r["item"] for r in held_out}.isdisjoint(r["item"] for r in reported)
    assert sorted({r["item"] for r in held_out}) == sorted(f"code-{f}" for f in rw.CODE_FUNCTIONS[3:6])
    with pytest.raises(ValueError, match="code_offset"):
        rw.build_workload(SPEC_BENCH, per_category=0, code=1, code_offset=99)


def test_the_benchmark_warns_on_items_the_suffix_settings_were_fitted_on(capsys):
    """The fit scripts' default items are the ones core.drafters.suffix.FIT_ITEMS records; the reported run's
    default items are disjoint from them, and a workload that reuses one is flagged."""
    if not SPEC_BENCH.is_file():
        pytest.skip("Spec-Bench's question.jsonl is not beside the project")
    import fit_suffix_confidence
    import fit_suffix_fallback  # noqa: F401  (its defaults are fit_suffix_confidence's)

    from core.drafters.suffix import FIT_ITEMS

    fitted = rw.build_workload(SPEC_BENCH, 1, 5, 1, fit_suffix_confidence.HELD_OUT.split(","), 3)
    assert sorted({r["item"] for r in fitted}) == sorted(FIT_ITEMS)
    reported = rw.build_workload(SPEC_BENCH, 1, 3, 0, ["coding", "summarization", "rag", "qa", "writing"])
    assert bench_suffix.fit_overlap(reported) == []
    assert bench_suffix.fit_overlap(rw.build_workload(SPEC_BENCH, 1, 4, 0, ["math", "qa"])) == [
        "code-textwrap.indent",
        "math-111",
    ]
