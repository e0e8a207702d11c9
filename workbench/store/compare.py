"""Where two runs' outputs part: the first differing token and the step of each run that emitted it."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Any

from core.stats import first_divergence
from core.trace import RunTrace


def _step_of(run: RunTrace, token: int | None) -> int | None:
    """The index of the step that emitted output token `token` (None past the end)."""
    if token is None:
        return None
    step = bisect_right(list(accumulate(run.accept_lengths)), token)
    return step if step < len(run.accept_lengths) else None


def _token_at(ids: list[int], i: int | None) -> int | None:
    return ids[i] if i is not None and i < len(ids) else None


def compare_traces(a: RunTrace, b: RunTrace) -> dict[str, Any]:
    """Where two runs' outputs first differ (token index and the step of each run that emitted it)
    and their per-step lengths."""
    first = first_divergence(a.output_ids, b.output_ids)
    return {
        "identical": first is None,
        "first_divergence": first,
        "token_a": _token_at(a.output_ids, first),
        "token_b": _token_at(b.output_ids, first),
        "step_a": _step_of(a, first),
        "step_b": _step_of(b, first),
        "tokens_a": len(a.output_ids),
        "tokens_b": len(b.output_ids),
        "lengths_a": a.accept_lengths,
        "lengths_b": b.accept_lengths,
    }
