"""GSM8K: a local JSON Lines file in the dataset's own format (question, answer), or Spec-Bench's 80
math_reasoning rows (GSM8K problems with their solutions)."""

from __future__ import annotations

from pathlib import Path

from workbench.evaluation.tasks.rows import line_id, read_rows, select_categories
from workbench.evaluation.tasks.spec_bench import load_spec_bench
from workbench.evaluation.tasks.task import Task

GSM8K_TEMPLATE = "{input}\n\nSolve the problem step by step, then give the final answer as 'The answer is <number>'."


def load_gsm8k(path: str | Path | None = None) -> list[Task]:
    """GSM8K rows from `path`, or without one Spec-Bench's math_reasoning rows."""
    if path is None:
        rows = [
            (t.id, t.input, t.answers) for t in select_categories(load_spec_bench(), ["math_reasoning"], "Spec-Bench")
        ]
    else:
        rows = [
            (
                row.ident("id", fallback=line_id(row, "gsm8k")),
                row.text("question", nonblank=True, what=" (a GSM8K row has question and answer)"),
                row.references("answer"),
            )
            for row in read_rows(path, what="GSM8K file")
        ]
    return [
        Task(id=i, task="math", input=q, answers=a, template=GSM8K_TEMPLATE, category="gsm8k", metric="gsm8k")
        for i, q, a in rows
    ]
