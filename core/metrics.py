"""Speed metrics of a run (MAL, TPS, acceptance) as METHODS.md defines them, and task scores as LongBench does."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


SCORERS = {"qa": qa_f1, "summarization": rouge_l, "code": code_edit_similarity}


def score(task_kind: str, prediction: str, answers: list[str]) -> float | None:
    """The task's metric ×100, max over the references; None when the task has no references or no metric."""
    scorer = SCORERS.get(task_kind)
    if scorer is None or not answers:
        return None
    return 100 * max(scorer(prediction, a) for a in answers)
