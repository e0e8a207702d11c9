"""Spec-Bench's question.jsonl: one task per question (its first turn), categories as in the paper."""

from __future__ import annotations

from pathlib import Path

from workbench.evaluation.tasks.rows import Row, read_rows
from workbench.evaluation.tasks.task import Task

ROOT = Path(__file__).resolve().parents[3]  # the project folder
SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"  # never copied into the project
SPEC_BENCH_TASK = {
    "summarization": "summarization",
    "rag": "qa",
    "qa": "qa",
    "math_reasoning": "math",
    "translation": "translation",
}


def spec_bench_task(row: Row) -> Task:
    """One Spec-Bench row (question_id, category, turns, reference)."""
    turns = row.data.get("turns")
    if not turns or not isinstance(turns, list) or not isinstance(turns[0], str):
        raise row.error("a Spec-Bench row needs a non-empty 'turns' list of strings")
    category = row.name("category", "other")
    # Only the first turn: the second of an MT-bench pair needs the model's own first answer.
    first = Row({"turns": turns[0]}, row.where).text("turns")
    return Task(
        id=row.ident("question_id"),
        task=SPEC_BENCH_TASK.get(category, "chat"),
        input=first,
        answers=row.references("reference"),
        category=category,
    )


def load_spec_bench(path: str | Path | None = None) -> list[Task]:
    """Every row of a Spec-Bench question.jsonl (the shared copy by default)."""
    return [spec_bench_task(row) for row in read_rows(path or SPEC_BENCH, what="Spec-Bench file")]
