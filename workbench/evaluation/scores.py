"""Task scores as LongBench's metrics.py, GSM8K and HumanEval define them (×100 applied by `score_task`)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from core.errors import InvalidInputError

if TYPE_CHECKING:
    from workbench.evaluation.tasks import Task

_PUNCTUATION = frozenset(string.punctuation)


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
    """1 when the prediction's final number equals the reference solution's (workbench.evaluation.sandbox), else 0."""
    from workbench.evaluation.sandbox import gsm8k_correct

    return 1.0 if gsm8k_correct(prediction, reference) else 0.0


def mean_target_probability(steps) -> float | None:
    """100 × the target model's mean probability (temperature 1) of the tokens a run emitted, read from its
    trace (every accepted node and every bonus token records it): the score of open-ended writing, where no
    reference exists (docs/AUTOMATIC_SETTINGS.md). Greedy emits each step's most likely token; a relaxed
    rule that accepts unlikely tokens lowers it. None for a run without recorded probabilities."""
    probs: list[float] = []
    for step in steps:
        path = sorted(
            (n for n in step.nodes if n.parent != -1 and n.decision in ("accepted", "rescued")), key=lambda n: n.depth
        )
        bonus = [n for n in step.nodes if n.decision == "bonus"]
        emitted = (path + bonus)[: len(step.emitted)]  # a stop string can cut the step's tokens short
        probs += [n.p for n in emitted if n.p is not None]
    return 100 * sum(probs) / len(probs) if probs else None


# Metric names as task files, LongBench sets and reports use them; each returns 0..1 for one reference.
METRICS: dict[str, Callable[..., float]] = {
    "qa_f1": qa_f1,
    "rouge_l": rouge_l,
    "code_sim": code_edit_similarity,
    "classification": classification_score,
    "retrieval": retrieval_score,
    "count": count_score,
    "gsm8k": gsm8k_accuracy,
}
KIND_METRIC = {"qa": "qa_f1", "summarization": "rouge_l", "code": "code_sim", "math": "gsm8k"}
PASS_AT_1 = "pass@1"  # HumanEval: executed, not compared with a reference
# Open writing: the target's own probability of what it wrote (mean_target_probability), read from a run's steps
# by families.family_score; a text alone has no such score.
TARGET_PROBABILITY = "target_probability"
TASK_METRICS = (*METRICS, PASS_AT_1, TARGET_PROBABILITY)  # what a task's `metric` may name


def score_task(
    task: "Task", prediction: str, *, execute_code: bool = False, timeout: float = 10.0, unsafe_exec: bool = False
) -> float | None:
    """A task's score ×100 as LongBench's eval.py computes it (first line only where it says so, max
    over the references), GSM8K final-number accuracy, or HumanEval pass@1 run in the sandbox.

    None means absent, never zero: no references, no metric for the task kind, or code execution not
    asked for (`execute_code`: HumanEval runs the model's code in workbench.evaluation.sandbox's sandbox,
    which raises SandboxUnavailable without bubblewrap unless `unsafe_exec` allows a plain subprocess)."""
    name = task.metric or KIND_METRIC.get(task.task)
    if name == TARGET_PROBABILITY:  # scored from the run's steps (families.family_score), not from the text
        return None
    if name == PASS_AT_1:
        if not execute_code or task.problem is None:
            return None
        from workbench.evaluation.sandbox import run_humaneval

        return 100.0 if run_humaneval(task.problem, prediction, timeout=timeout, unsafe=unsafe_exec).passed else 0.0
    if name is None or not task.answers:
        return None
    if name not in METRICS:
        raise InvalidInputError(f"unknown metric {name!r} for task {task.id}; known: {', '.join(TASK_METRICS)}")
    if task.first_line:
        prediction = prediction.lstrip("\n").split("\n")[0]
    extra = {"all_classes": task.all_classes} if name == "classification" else {}
    return 100 * max(METRICS[name](prediction, a, **extra) for a in task.answers)
