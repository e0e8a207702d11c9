"""Issue 33, seventh newcomer pass: the prefill estimate after a Stop, the diff summary's first difference, errors
shown in Markdown, the CLI's cancelled run, replay's step label, the re-score's reason for no change."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def _run(tokens: int, seconds: float, status: str, steps: int):
    return SimpleNamespace(prompt_ids=[0] * tokens, prefill_seconds=seconds, status=status, steps=[object()] * steps)


def test_a_prefill_cut_short_by_stop_is_not_observed(monkeypatch):
    """A 3,658-token prompt Stopped while reading (7 s of a 14 s read), then the same prompt: the estimate said 6.8 s,
    priced from the cut read. Only a whole read is observed: a complete run, or one that took a step."""
    from workbench import service

    monkeypatch.setattr(service, "cost_model", lambda target: None)
    target = SimpleNamespace(name="m", device="cpu", dtype="float32")
    clock = service.PrefillClock()
    clock.observe(target, _run(3658, 7.0, "cancelled", 0))  # Stopped mid-prompt
    assert clock.estimate(target, 3658) is None
    clock.observe(target, _run(3658, 14.0, "cancelled", 3))  # Stopped while decoding: its read was whole
    assert clock.estimate(target, 3658)[0] == pytest.approx(14.0)
    clock.observe(target, _run(3658, 7.0, "cancelled", 0))
    assert clock.estimate(target, 3658)[0] == pytest.approx(14.0)
    clock.observe(target, _run(3658, 13.0, "complete", 0))
    assert clock.estimate(target, 3658)[0] == pytest.approx(13.0)
