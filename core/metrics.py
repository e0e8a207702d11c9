"""Speed metrics of a run (MAL, TPS, acceptance) as METHODS.md defines them, pooled over runs, and task
scores as LongBench, GSM8K and HumanEval define them."""
from __future__ import annotations

import re
import statistics
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.errors import InvalidInputError

if TYPE_CHECKING:
    from core.tasks import Task
    from core.trace import RunTrace

_PUNCTUATION = frozenset(string.punctuation)


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


# ---- Task scores, as LongBench's metrics.py defines them (×100 is applied by `score`) ----

def normalize_answer(text: str) -> str:
    """LongBench / SQuAD normalisation: lower-case, drop punctuation and the articles a/an/the, collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def qa_f1(prediction: str, reference: str) -> float:
    """Token F1 between normalised prediction and reference (0..1)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F of the `rouge` package, as LongBench computes it (0 where it cannot: empty text)."""
    from rouge import Rouge

    try:
        return float(Rouge().get_scores([prediction], [reference], avg=True)["rouge-l"]["f"])
    except (ValueError, RecursionError):  # empty hypothesis or reference; very long inputs
        return 0.0


def code_edit_similarity(prediction: str, reference: str) -> float:
    """LongBench's code_sim_score: the first line without ``` # or // against the reference, fuzz.ratio / 100."""
    from rapidfuzz import fuzz

    first = ""
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            first = line
            break
    return round(fuzz.ratio(first, reference)) / 100  # fuzzywuzzy returns a rounded integer


def classification_score(prediction: str, reference: str, all_classes: Sequence[str] = ()) -> float:
    """LongBench's classification_score (trec): 1/n over the n labels found in the prediction, when the
    reference is one of them; a label contained in the reference but not equal to it is dropped first."""
    matches = [c for c in all_classes if c in prediction]
    for term in matches:  # LongBench removes while iterating (skipping the next item); kept as it is
        if term in reference and term != reference:
            matches.remove(term)
    return 1.0 / len(matches) if reference in matches else 0.0


def retrieval_score(prediction: str, reference: str) -> float:
    """LongBench's retrieval_score: the share of the numbers in the prediction equal to the reference's 'Paragraph N'."""
    wanted = re.findall(r"Paragraph (\d+)", reference)
    numbers = re.findall(r"\d+", prediction)
    if not wanted or not numbers:  # LongBench would fail on a reference without 'Paragraph N'
        return 0.0
    return sum(n == wanted[0] for n in numbers) / len(numbers)


def count_score(prediction: str, reference: str) -> float:
    """LongBench's count_score: the share of the numbers in the prediction equal to the reference."""
    numbers = re.findall(r"\d+", prediction)
    return sum(n == str(reference) for n in numbers) / len(numbers) if numbers else 0.0


def gsm8k_accuracy(prediction: str, reference: str) -> float:
    """1 when the prediction's final number equals the reference solution's (core.sandbox), else 0."""
    from core.sandbox import gsm8k_correct

    return 1.0 if gsm8k_correct(prediction, reference) else 0.0


# Metric names as task files, LongBench sets and reports use them; each returns 0..1 for one reference.
METRICS: dict[str, Callable[..., float]] = {
    "qa_f1": qa_f1, "rouge_l": rouge_l, "code_sim": code_edit_similarity, "classification": classification_score,
    "retrieval": retrieval_score, "count": count_score, "gsm8k": gsm8k_accuracy,
}
KIND_METRIC = {"qa": "qa_f1", "summarization": "rouge_l", "code": "code_sim", "math": "gsm8k"}
PASS_AT_1 = "pass@1"  # HumanEval: executed, not compared with a reference


def score(task_kind: str, prediction: str, answers: list[str]) -> float | None:
    """The metric of a task kind ×100, max over the references; None when there are no references or no metric."""
    from core.tasks import Task

    return score_task(Task(id="", task=task_kind, input="", answers=list(answers)), prediction)


def score_task(task: "Task", prediction: str, *, execute_code: bool = False, timeout: float = 10.0) -> float | None:
    """A task's score ×100 as LongBench's eval.py computes it (first line only where it says so, max
    over the references), GSM8K final-number accuracy, or HumanEval pass@1 run in the sandbox.

    None means absent, never zero: no references, no metric for the task kind, or code execution not
    asked for (`execute_code`: HumanEval runs the model's code, in core.sandbox's subprocess)."""
    name = task.metric or KIND_METRIC.get(task.task)
    if name == PASS_AT_1:
        if not execute_code or task.problem is None:
            return None
        from core.sandbox import run_humaneval

        return 100.0 if run_humaneval(task.problem, prediction, timeout=timeout).passed else 0.0
    if name is None or not task.answers:
        return None
    if name not in METRICS:
        raise InvalidInputError(f"unknown metric {name!r} for task {task.id}; known: {', '.join([*METRICS, PASS_AT_1])}")
    if task.first_line:
        prediction = prediction.lstrip("\n").split("\n")[0]
    extra = {"all_classes": task.all_classes} if name == "classification" else {}
    return 100 * max(METRICS[name](prediction, a, **extra) for a in task.answers)


# ---- Pooling runs into a table row (MAL, TPS, speed-up) ---------------------------------------

PHASES = ("draft_ms", "forward_ms", "verify_ms", "bookkeeping_ms", "step_ms")


def run_totals(run: "RunTrace") -> dict[str, Any]:
    """A run's additive counts and times: what pooling over several runs sums (MAL = Σ decoded / Σ steps)."""
    m = run_metrics(run)
    return {
        "tokens": m["tokens"], "steps": m["steps"], "decoded": (m["mal"] or 0.0) * m["steps"],
        "decode_seconds": run.decode_seconds, "prefill_seconds": run.prefill_seconds,
        "drafted": m["drafted"], "accepted": m["accepted"], "rescued": m["rescued"], "timed_steps": len(run.steps),
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
    return {
        "mal": _ratio(total("decoded"), total("steps")),
        # No steps (beam search through transformers): decoding tokens/s is unknown, not 0; e2e_tps still holds.
        "tps": _ratio(total("decoded"), total("decode_seconds")) if total("steps") else None,
        "speedup": None,
        "accept_rate": _ratio(total("accepted"), total("drafted")),
        "rescued_share": _ratio(total("rescued"), total("drafted")),
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


def add_speedups(summary: dict[str, dict[str, Any]], baseline: str = "greedy") -> dict[str, dict[str, Any]]:
    """Set each row's `speedup`: its TPS over the baseline's (greedy: autoregressive decoding in the same run)."""
    base = summary.get(baseline, {}).get("tps")
    for row in summary.values():
        row["speedup"] = row["tps"] / base if base and row["tps"] else None
    return summary
