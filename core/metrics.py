"""Speed metrics of a run (MAL, TPS, acceptance) as METHODS.md defines them."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.trace import RunTrace


def run_metrics(run: "RunTrace") -> dict[str, Any]:
    """MAL = tokens / steps (bonus included, prefill excluded); TPS = tokens / decode seconds."""
    tokens = len(run.output_ids)
    lengths = run.accept_lengths
    steps = len(lengths)
    # Tokens the timed decoding steps produced: all of them for our engine; for transformers'
    # generate, the first token comes from the prompt pass and is timed as prefill.
    decoded = sum(lengths) if run.external_accept_lengths is not None or run.steps else tokens
    drafted = sum(s.tree_size for s in run.steps)
    accepted = sum(s.accepted for s in run.steps)
    by_source_drafted: Counter[str] = Counter()
    by_source_accepted: Counter[str] = Counter()
    for s in run.steps:
        for n in s.nodes:
            if n.node == 0 or n.decision == "bonus":
                continue
            by_source_drafted[n.source] += 1
            if n.decision in ("accepted", "rescued"):
                by_source_accepted[n.source] += 1
    phases = {}
    if run.steps:
        for phase in ("draft_ms", "forward_ms", "verify_ms", "bookkeeping_ms"):
            phases[phase] = sum(getattr(s, phase) for s in run.steps) / len(run.steps)
        phases["step_ms"] = sum(s.step_ms for s in run.steps) / len(run.steps)
    return {
        "tokens": tokens,
        "steps": steps,
        "mal": decoded / steps if steps else None,
        "tps": decoded / run.decode_seconds if run.decode_seconds > 0 else None,
        "e2e_tps": tokens / (run.decode_seconds + run.prefill_seconds) if run.decode_seconds + run.prefill_seconds > 0 else None,
        "decode_seconds": run.decode_seconds,
        "prefill_seconds": run.prefill_seconds,
        "accept_rate": accepted / drafted if drafted else None,
        "drafted": drafted,
        "accepted": accepted,
        "rescued": sum(1 for s in run.steps for n in s.nodes if n.decision == "rescued"),
        "accept_rate_by_source": {k: by_source_accepted[k] / v for k, v in by_source_drafted.items()},
        **phases,
    }
