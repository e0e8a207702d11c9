"""Where two runs' outputs part: the first differing token and the step of each run that emitted it."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

from core.stats import CLOCK_PHRASES, first_divergence, run_divergence, speedup
from core.token_text import texts_by_id
from core.trace import NodeTrace, RunTrace


def _step_of(run: RunTrace, token: int | None) -> int | None:
    """The index of the step that emitted output token `token` (None past the end)."""
    if token is None:
        return None
    step = bisect_right(list(accumulate(run.accept_lengths)), token)
    return step if step < len(run.accept_lengths) else None


def _token_at(ids: list[int], i: int | None) -> int | None:
    return ids[i] if i is not None and i < len(ids) else None


NodesOf = Callable[[RunTrace, int], Sequence[NodeTrace]]


def _nodes_in_trace(run: RunTrace, step: int) -> Sequence[NodeTrace]:
    return run.steps[step].nodes if step < len(run.steps) else []


def _text_at(run: RunTrace, step: int | None, token: int | None, nodes_of: NodesOf) -> str | None:
    """The text of output token `token` as the node records of the step that emitted it name it (⟨id⟩ if none)."""
    if token is None or step is None:
        return None
    return texts_by_id((n.token_id, n.token_text) for n in nodes_of(run, step))(token)


def compare_traces(a: RunTrace, b: RunTrace, nodes_of: NodesOf = _nodes_in_trace) -> dict[str, Any]:
    """Where two runs' outputs first differ (token index, its text and the step of each run that emitted it)
    and their per-step lengths. `nodes_of(run, step)` gives a step's node records (the store reads the two it needs
    when it loaded the traces without nodes). Runs of the same prompt also get b's speed-up over a and the clock it
    is a ratio of (core.stats.speedup, as the app's tabs compute it; None when either run is not complete)."""
    first = first_divergence(a.output_ids, b.output_ids)
    token_a, token_b, step_a, step_b = (
        _token_at(a.output_ids, first),
        _token_at(b.output_ids, first),
        _step_of(a, first),
        _step_of(b, first),
    )
    ratio, clock = speedup(b, a) if list(a.prompt_ids) == list(b.prompt_ids) else (None, "")
    return {
        "identical": first is None,
        "first_divergence": first,
        # one output a prefix of the other's, the shorter run cut short (Stopped, at its cap): not a divergence
        "stopped_before_diverging": first is not None and run_divergence(a, b) is None,
        "token_a": token_a,
        "token_b": token_b,
        "text_a": _text_at(a, step_a, token_a, nodes_of),
        "text_b": _text_at(b, step_b, token_b, nodes_of),
        "step_a": step_a,
        "step_b": step_b,
        "status_a": a.status,
        "status_b": b.status,
        "tokens_a": len(a.output_ids),
        "tokens_b": len(b.output_ids),
        "lengths_a": a.accept_lengths,
        "lengths_b": b.accept_lengths,
        "speedup_b_over_a": ratio,
        "speedup_clock": CLOCK_PHRASES.get(clock),  # which clock the ratio is of, in the app's words
    }
