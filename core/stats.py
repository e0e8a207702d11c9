"""Trace metrics of a run (MAL, TPS, acceptance per source and depth, first divergence) as docs/ALGORITHMS.md
defines them, and pooled over runs. Pure functions of trace records: no model, no task scores."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.types import ACCEPTED, JUDGED, Decision

if TYPE_CHECKING:
    from core.trace import NodeTrace, RunTrace


def first_divergence(a_ids: Sequence[int], b_ids: Sequence[int]) -> int | None:
    """Index of the first differing token; the shorter length when one is a prefix of the other;
    None when identical."""
    for i, (x, y) in enumerate(zip(a_ids, b_ids)):
        if x != y:
            return i
    if len(a_ids) != len(b_ids):
        return min(len(a_ids), len(b_ids))
    return None


def cut_short(run: RunTrace) -> bool:
    """A run whose output ends where it was cut, not where it chose to end: Stopped (cancelled), failed, or at its
    token cap. A run that ended by its own EOS or stop string chose its end."""
    return run.status != "complete" or run.stop_reason == "max_new_tokens"


def run_divergence(a: RunTrace, b: RunTrace) -> int | None:
    """Where two runs' outputs part (first_divergence), with one exception: when one output is a prefix of the other's
    and that run was cut short (cut_short), it stopped before it could diverge, and there is no divergence (None).
    A run that ended by its own EOS where the other went on did diverge: its next token was another one (EOS).
    The one decision behind the Compare column's divergence bar and the Diff tab's first divergence."""
    j = first_divergence(a.output_ids, b.output_ids)
    shorter = a if len(a.output_ids) <= len(b.output_ids) else b
    if j is not None and j == len(shorter.output_ids) and cut_short(shorter):
        return None
    return j


def equal_prefix(reference: Sequence[int], ids: Sequence[int]) -> int:
    """Tokens of `reference` (greedy's output) that `ids` reproduces before it first differs."""
    j = first_divergence(reference, ids)
    return len(reference) if j is None else min(j, len(reference))


def equal_share(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> float | None:
    """Fidelity of several outputs: Σ equal_prefix / Σ len(reference) over (reference, output) pairs;
    1.0 when every output is greedy's. None without reference tokens."""
    total = sum(len(ref) for ref, _ in pairs)
    return sum(equal_prefix(ref, ids) for ref, ids in pairs) / total if total else None


class AcceptanceCounts:
    """Accepted ÷ *verified* draft nodes per key (a source, a depth, or both): verified = judged by the walk
    (accepted, rejected or rescued; the root, the bonus and unreached nodes are left out, since an unreached
    node was never judged), accepted = on the accepted path (a rescued node counts as accepted). The one count
    behind every per-source / per-depth acceptance: a run's metrics (`acceptance_by`) and the tree sizer's
    estimates within a request (core.acceptance_prior.AcceptanceEstimate counts the same way)."""

    def __init__(self) -> None:
        self.verified: Counter = Counter()
        self.accepted: Counter = Counter()

    def add(self, key: Hashable, decision: Decision | str) -> None:
        if decision in JUDGED:
            self.verified[key] += 1
            if decision in ACCEPTED:
                self.accepted[key] += 1

    def pairs(self) -> dict[Any, tuple[int, int]]:
        """(accepted, verified) per key: numbers (depths) in numeric order, then the rest in order of their text (a
        text order drew the analytics depth line 1, 10, 2, 3, ...: the seventeenth fresh pass)."""
        return {k: (self.accepted[k], self.verified[k]) for k in sorted(self.verified, key=_key_order)}


def _key_order(key: Any) -> tuple[bool, float, str]:
    number = isinstance(key, (int, float)) and not isinstance(key, bool)
    return (not number, float(key) if number else 0.0, "" if number else str(key))


# Three different acceptances, each with its own name and a one-line meaning, used as is by the app's labels, the
# CLI and the docs: "acceptance" alone meant all three (and read as a fraction in the CLI, a percentage in the app).
TOKEN_ACCEPTANCE = "token acceptance"  # run_metrics' accept_rate
NODE_ACCEPTANCE = "node acceptance"  # acceptance_by, per tree depth or per draft source
POSITION_ACCEPTANCE = "position acceptance"  # position_acceptance
ACCEPTANCE_MEANING = {
    TOKEN_ACCEPTANCE: "draft tokens accepted ÷ draft tokens proposed, over every node of every tree (bonus not counted)",
    NODE_ACCEPTANCE: "accepted ÷ judged draft nodes (a node the walk never reached is left out), per depth or source",
    POSITION_ACCEPTANCE: "at draft position d: steps that accepted ≥ d tokens ÷ steps that offered a judged node at d, "
    "i.e. the chance position d is accepted once d − 1 were",
}


def acceptance_by(trace: "RunTrace", key: Callable[["NodeTrace"], Any]) -> dict[Any, tuple[int, int]]:
    """(accepted, verified) per key of a run's draft nodes (AcceptanceCounts): bench JSON, store views and
    the UI all read it."""
    counts = AcceptanceCounts()
    for step in trace.steps:
        for n in step.nodes:
            if n.parent != -1:
                counts.add(key(n), n.decision)
    return counts.pairs()


def position_acceptance(trace: "RunTrace") -> dict[int, tuple[int, int]]:
    """Per draft position d (1 = the first token after the root): (steps that accepted ≥ d tokens, steps
    that offered a judged node at depth d). Their ratio is the conditional acceptance at d: the chance
    that position d is accepted once d − 1 were (vLLM's per-position acceptance, here per request)."""
    offered: Counter = Counter()
    accepted: Counter = Counter()
    for step in trace.steps:
        depths = {n.depth for n in step.nodes if n.parent != -1 and n.decision in JUDGED}
        for d in depths:
            offered[d] += 1
            accepted[d] += step.accepted >= d
    return {d: (accepted[d], offered[d]) for d in sorted(offered)}


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
        "e2e_tps": tokens / (run.decode_seconds + run.prefill_seconds)
        if run.decode_seconds + run.prefill_seconds > 0
        else None,
        "decode_seconds": run.decode_seconds,
        "prefill_seconds": run.prefill_seconds,
        "accept_rate": accepted / drafted if drafted else None,
        "drafted": drafted,
        "accepted": accepted,
        "rescued": sum(1 for s in run.steps for n in s.nodes if n.decision == "rescued"),
        "accept_rate_by_source": {k: a / n for k, (a, n) in acceptance_by(run, lambda node: node.source).items()},
        **phases,
    }


# ---- One run's speed-up against another (the app's tabs and `store compare`) -----------------------------------

# What a speed-up is a ratio of, in the words every place that shows one uses (Compare's note starts with them).
CLOCK_PHRASES = {
    "cpu": "speed-ups from decoding CPU time",
    "wall": "speed-ups from the wall clock (decoding CPU time not recorded)",
}


def clock_phrase(clocks: set[str] | frozenset[str]) -> str:
    """Which clock a set of speed-ups (speedup's second values) are ratios of, in CLOCK_PHRASES' words; "" for none."""
    clocks = set(clocks) & set(CLOCK_PHRASES)
    if len(clocks) == 2:
        return "speed-ups: some from decoding CPU time, some from the wall clock (decoding CPU time not recorded)"
    return CLOCK_PHRASES[clocks.pop()] if clocks else ""


def decode_cpu_tps(run: "RunTrace") -> float | None:
    """Tokens decoded per CPU second of decoding (RunTrace.decode_cpu_seconds); None when not recorded."""
    tps = run_metrics(run)["tps"]
    if not run.decode_cpu_seconds or not tps:
        return None
    return tps * run.decode_seconds / run.decode_cpu_seconds


def speedup(run: "RunTrace", reference: "RunTrace") -> tuple[float | None, str]:
    """(`run`'s speed-up over `reference`, the clock it is a ratio of: "cpu" or "wall"): tokens per CPU second of
    decoding when both runs recorded it (other work on the core does not inflate it), else wall-clock
    tokens per second; (None, "") when either is not a complete run with a speed."""
    if run.status != "complete" or reference.status != "complete":
        return None, ""
    cpu, ref_cpu = decode_cpu_tps(run), decode_cpu_tps(reference)
    if cpu and ref_cpu:
        return cpu / ref_cpu, "cpu"
    tps, ref_tps = run_metrics(run)["tps"], run_metrics(reference)["tps"]
    if tps and ref_tps:
        return tps / ref_tps, "wall"
    return None, ""


CLOCKS_DISAGREE = 0.2  # relative difference of the two clocks' speed-ups past which a column says so


def wall_clock_note(run: "RunTrace", reference: "RunTrace", tolerance: float = CLOCKS_DISAGREE) -> str:
    """When `run`'s speed-up over `reference` is from decoding CPU time (speedup) and the wall-clock tokens/s ratio
    differs from it by more than `tolerance` (relative), a few words saying both: the bars and the tok/s labels
    then disagree, and the reason is other work on the core. "" otherwise."""
    ratio, clock = speedup(run, reference)
    tps, ref_tps = run_metrics(run)["tps"], run_metrics(reference)["tps"]
    if clock != "cpu" or not ratio or not tps or not ref_tps:
        return ""
    wall = tps / ref_tps
    if abs(wall - ratio) <= tolerance * ratio:
        return ""
    return (
        f"wall clock {wall:.2f}× (tok/s ÷ {reference.method}'s) against {ratio:.2f}× from decoding CPU time: "
        "other work shared the core while they ran"
    )


# ---- Pooling runs into a table row (MAL, TPS, speed-up) ---------------------------------------

PHASES = ("draft_ms", "forward_ms", "verify_ms", "bookkeeping_ms", "step_ms")


def run_totals(run: "RunTrace") -> dict[str, Any]:
    """A run's additive counts and times: what pooling over several runs sums (MAL = Σ decoded / Σ steps)."""
    m = run_metrics(run)
    return {
        "tokens": m["tokens"],
        "steps": m["steps"],
        "decoded": (m["mal"] or 0.0) * m["steps"],
        "decode_seconds": run.decode_seconds,
        "prefill_seconds": run.prefill_seconds,
        "drafted": m["drafted"],
        "accepted": m["accepted"],
        "rescued": m["rescued"],
        "timed_steps": len(run.steps),
        "by_source": {
            k: [a, n] for k, (a, n) in acceptance_by(run, lambda node: node.source).items()
        },  # [accepted, verified]
        "by_position": {str(d): [a, n] for d, (a, n) in position_acceptance(run).items()},  # [accepted, offered]
        **{f"{k}_total": sum(getattr(s, k) for s in run.steps) for k in PHASES},
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def pool(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary of several runs (rows holding `run_totals` and `score`): MAL and TPS pooled (total
    tokens over total steps or seconds), mean score over the rows that have one (None when none has)."""

    def total(key: str) -> float:
        return sum(r.get(key) or 0 for r in rows)

    timed = total("timed_steps")
    scores = [r["score"] for r in rows if r.get("score") is not None]
    by_source = _sum_counts(r.get("by_source") for r in rows)
    by_position = _sum_counts(r.get("by_position") for r in rows)
    return {
        "mal": _ratio(total("decoded"), total("steps")),
        # No steps (beam search through transformers): decoding tokens/s is unknown, not 0; e2e_tps still holds.
        "tps": _ratio(total("decoded"), total("decode_seconds")) if total("steps") else None,
        "speedup": None,
        "accept_rate": _ratio(total("accepted"), total("drafted")),
        "rescued_share": _ratio(total("rescued"), total("drafted")),
        "accept_rate_by_source": {
            k: a / n for k, (a, n) in sorted(by_source.items())
        },  # accepted ÷ verified (acceptance_by)
        # P(position d accepted | d − 1 accepted), pooled over the runs (position_acceptance)
        "accept_rate_by_position": {d: a / n for d, (a, n) in sorted(by_position.items(), key=lambda kv: int(kv[0]))},
        "score": statistics.fmean(scores) if scores else None,
        "draft_ms_per_step": _ratio(total("draft_ms_total"), timed),
        "verify_ms_per_step": _ratio(total("verify_ms_total"), timed),
        "bookkeeping_ms_per_step": _ratio(total("bookkeeping_ms_total"), timed),
        "step_ms": _ratio(total("step_ms_total"), timed),
        "forward_share": _ratio(total("forward_ms_total"), total("step_ms_total")) if timed else None,
        "tokens": int(total("tokens")),
        "e2e_tps": _ratio(total("tokens"), total("decode_seconds") + total("prefill_seconds")),
        "runs": len(rows),
        "scored": len(scores),
    }


def _sum_counts(maps) -> dict[str, list[int]]:
    """{key: [a, n]} summed over several such maps (None skipped)."""
    out: dict[str, list[int]] = {}
    for m in maps:
        for key, (a, n) in (m or {}).items():
            counts = out.setdefault(key, [0, 0])
            counts[0] += a
            counts[1] += n
    return out


def add_speedups(summary: dict[str, dict[str, Any]], baseline: str = "greedy") -> dict[str, dict[str, Any]]:
    """Set each row's `speedup`: its TPS over the baseline's (greedy: autoregressive decoding in the same run)."""
    base = summary.get(baseline, {}).get("tps")
    for row in summary.values():
        row["speedup"] = row["tps"] / base if base and row["tps"] else None
    return summary
