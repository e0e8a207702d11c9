"""benchmarks/bench_csd_keys.py's report: coverage per key order and λ, the gate, the key that fired, precision."""

from __future__ import annotations

import importlib.util
import sys

from conftest import ROOT


def load_bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_csd_keys", ROOT / "benchmarks" / "bench_csd_keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rejection(exact, text, prefix, gap=-0.5, rejoin=None, x=1, t=2):
    r = {"x": x, "t": t, "gap": gap, "counts": {"exact": exact, "text": text, "prefix": prefix}}
    if rejoin is not None:
        r["rejoin"] = {"text": rejoin, "words": rejoin}
    return r


def test_summary_counts_coverage_gate_keys_and_precision():
    bench = load_bench()
    rows = [
        {
            "rejections": [
                rejection(7, 9, 0, rejoin=True),  # exact at λ 6
                rejection(1, 8, 0, rejoin=False),  # text only
                rejection(0, 0, 6, rejoin=False, x=3, t=4),  # prefix only; swaps a number
                rejection(0, 9, 0, gap=-9.0),  # text, but the gate refuses it
                rejection(0, 0, 0),
            ]
        }
    ]
    texts = {1: " The", 2: "the", 3: " 3", 4: " 34"}.__getitem__
    s = bench.summarise(rows, texts, lams=(6,))["by_order"]
    assert s["exact"][6]["covered"] == 1 and s["exact"][6]["gated"] == 1 and s["exact"][6]["precision_text"] == 1.0
    assert (
        s["text"][6]["covered"] == 3
        and s["text"][6]["gated"] == 2
        and s["text"][6]["fired_key"] == {"exact": 1, "text": 1}
    )
    assert s["prefix"][6]["fired_key"] == {"exact": 1, "prefix": 1} and s["prefix"][6]["number_or_operator_swaps"] == 1
    assert s["all"][6]["covered"] == 4 and s["all"][6]["gated"] == 3 and s["all"][6]["judged"] == 3
    assert s["all"][6]["text_preserving"] == 1 and abs(s["all"][6]["coverage"] - 0.8) < 1e-12
    low, high = s["all"][6]["coverage_ci"]
    assert low < 0.8 < high


def test_same_text_and_meaning_swaps():
    bench = load_bench()
    assert bench.same_text(" return x", " return x + 1") and bench.same_text(" return x + 1", " return x")
    assert not bench.same_text(" solve it", " determine it")
    assert bench.swaps_meaning(" ==", " !=") and bench.swaps_meaning("3", "1")
    assert not bench.swaps_meaning(" solve", " determine") and not bench.swaps_meaning(".\n", " and")
    assert not bench.swaps_meaning(" 3", "3")  # one number, another spelling


def test_the_thinned_curve_ends_at_the_full_table_and_grows_with_observations():
    from core.memory import CorrectionMemory, PairKeys

    bench = load_bench()
    texts = {1: " The", 2: "the", 3: "THE", 4: " cat", 5: "Cat"}
    memory = CorrectionMemory({(1, 4): 40, (3, 5): 40, (2, 4): 1})
    rows = [
        {"rejections": [{"x": 2, "t": 5, "gap": -0.1}, {"x": 1, "t": 4, "gap": -0.1}, {"x": 4, "t": 1, "gap": -0.1}]}
    ]
    curve = bench.thinned_curve(
        rows,
        memory,
        lambda code: PairKeys.of(code, type("T", (), {"decode": lambda self, ids: texts[ids[0]]})(), "t"),
        fractions=(0.05, 1),
    )
    full = curve[-1]
    assert full["observations"] == 81 and full["exact lam>=6"] == 1 / 3  # (1, 4) only
    assert full["text lam>=6"] == full["all lam>=6"] == 2 / 3  # (2, 5) by the text key; (4, 1) by none
    assert curve[0]["observations"] < 81 and curve[0]["text lam>=6"] <= full["text lam>=6"]
