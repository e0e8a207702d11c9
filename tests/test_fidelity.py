"""Near-tie flip report (issue 23, item 4): where a lossless method leaves greedy, the target's margin there."""

from __future__ import annotations

from core.methods import run_method
from workbench.evaluation.fidelity import flip_report, flip_summary


def test_a_flip_is_located_and_measured_under_greedys_prefix(tiny):
    prompt = [3, 14, 15, 92, 65]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 12}).output_ids
    other = list(greedy)
    other[4] = (greedy[4] + 1) % 96
    report = flip_report(tiny, prompt, greedy, other)
    assert report["position"] == 4 and report["greedy_token"] == greedy[4] and report["token"] == other[4]
    assert report["gap"] > 0 and report["margin"] >= 0  # greedy's token is the argmax there
    assert report["gap"] >= report["margin"] - 1e-6  # no token beats the runner-up by less than the margin
    assert report["dtype"] == "float32" and report["near_tie"] == (abs(report["gap"]) <= 1e-3)
    assert flip_report(tiny, prompt, greedy, greedy) is None
    assert flip_report(tiny, prompt, greedy, greedy[:5]) is None  # stopped early: not a flip
    line = flip_summary([None, report])
    assert line.startswith("1 lossless run(s) left greedy's tokens") and "float32" in line
    assert flip_summary([None]) is None
