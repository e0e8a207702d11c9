"""benchmarks/bench_compress.py's checks of issue 22's targets, on hand-made rows (no model)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_compress", ROOT / "benchmarks" / "bench_compress.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows_of(scores, tokens=1200):
    """scores: {method: {rate: [per-item scores]}} -> bench rows (e2e 10 s for greedy@1.0, 5 s otherwise)."""
    out = []
    for m, by_rate in scores.items():
        for r, values in by_rate.items():
            for i, v in enumerate(values):
                e2e = 10.0 if (m, r) == ("greedy", 1.0) else 5.0
                out.append(
                    {
                        "id": str(i),
                        "category": "summarization",
                        "method": m,
                        "rate": r,
                        "reached": r,
                        "score": v,
                        "prefill_s": 1.0,
                        "decode_s": e2e - 1.0,
                        "compress_s": 0.5 if r < 1 else 0.0,
                        "e2e_s": e2e,
                        "tokens": 10,
                        "steps": 5,
                        "prompt_tokens": int(tokens * r),
                        "full_prompt_tokens": tokens,
                    }
                )
    return out


def test_recovery_margin_is_zero_exactly_at_the_target_and_signs_the_verdict(bench):
    # greedy loses 10 points on average; casd at 0.5 wins back exactly half, then a bit less
    g1, g5 = [30.0, 20.0, 40.0], [20.0, 10.0, 30.0]
    assert bench.recovery(30.0, 20.0, 25.0) == 0.5 and bench.recovery(20.0, 20.0, 25.0) is None
    at = bench.recovery_margin(rows_of({"greedy": {1.0: g1, 0.5: g5}, "casd": {0.5: [25.0, 15.0, 35.0]}}))
    assert at["mean"] == pytest.approx(0.0) and at["n"] == 3
    below = bench.recovery_margin(rows_of({"greedy": {1.0: g1, 0.5: g5}, "casd": {0.5: [24.0, 14.0, 35.0]}}))
    assert below["mean"] == pytest.approx(-2 / 3) and below["ci95"] > 0
    assert bench.recovery_verdict(30.0, 20.0, 25.0).startswith("PASS")
    assert bench.recovery_verdict(30.0, 20.0, 24.0, margin=below).startswith("MISS")
    assert "points over the target's score" in bench.recovery_verdict(30.0, 20.0, 24.0, margin=below)
    assert bench.recovery_verdict(20.0, 21.0, 24.0).startswith("N/A")


def test_every_casd_variant_gets_both_targets_and_from_json_reprints_them(bench, tmp_path, capsys):
    rows = rows_of(
        {
            "greedy": {1.0: [30.0, 30.0], 0.5: [20.0, 20.0]},
            "casd": {1.0: [30.0, 30.0], 0.5: [21.0, 21.0]},
            "casd[delta=0.001]": {1.0: [30.0, 30.0], 0.5: [28.0, 28.0]},
        }
    )
    methods = ["greedy", "casd", "casd[delta=0.001]"]
    _, verdicts = bench.report(rows, methods, [1.0, 0.5], "header")
    assert verdicts["recovery"].startswith("MISS") and verdicts["e2e"].startswith("PASS")  # 5 s vs 10 s = 0.5x
    assert verdicts["by_method"]["casd[delta=0.001]"]["recovery"].startswith("PASS")
    assert "80% of the loss" in verdicts["by_method"]["casd[delta=0.001]"]["recovery"]
    short = [dict(r, full_prompt_tokens=500) for r in rows]
    assert bench.report(short, methods, [1.0, 0.5], "")[1]["e2e"].startswith("N/A")
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"config": {"model": "m", "compressor": "selfinfo"}, "rows": rows}))
    capsys.readouterr()
    assert bench.from_json(path) == 0
    out = capsys.readouterr().out
    assert "casd[delta=0.001]:" in out and "recovers 80% of the loss" in out and "recovers 10% of the loss" in out
