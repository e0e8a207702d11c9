"""The project's task files (JSON Lines): its own rows (id, task, input, context, answers, template, ...)
and, line by line, rows in Spec-Bench's, HumanEval's or LongBench's own format."""

from __future__ import annotations

from pathlib import Path

from core.params import PARAMS
from workbench.evaluation.sandbox import HUMANEVAL_STOP
from workbench.evaluation.scores import METRICS, TARGET_PROBABILITY
from workbench.evaluation.tasks.humaneval import HUMANEVAL_MAX_NEW_TOKENS, humaneval_task
from workbench.evaluation.tasks.longbench import longbench_name, longbench_task
from workbench.evaluation.tasks.rows import Row, line_id, read_rows, select_categories, select_subset
from workbench.evaluation.tasks.spec_bench import spec_bench_task
from workbench.evaluation.tasks.task import Task, check_template


def project_task(row: Row) -> Task:
    """A row of the project's own format: id, task and input required; optional context, answers, template,
    max_new_tokens, chat, category and metric (a name in scores.METRICS, or target_probability); a
    HumanEval-style row adds test and entry_point."""
    missing = [k for k in ("id", "task") if not row.data.get(k)] + (
        [] if isinstance(row.data.get("input"), str) else ["input"]
    )
    if missing:
        raise row.error(f"missing field(s) {', '.join(missing)} (a task needs id, task and input)")
    text, context = row.text("input"), row.text("context", required=False)
    if not text.strip() and not context:
        raise row.error("both input and context are empty: there is nothing to prompt with")
    template = row.text("template", required=False)
    if template is not None:
        check_template(template, row.where)
    kind = row.name("task")
    metric = row.name("metric")
    if metric is not None and metric not in (*METRICS, TARGET_PROBABILITY):
        raise row.error(f"unknown metric {metric!r}; known: {', '.join([*METRICS, TARGET_PROBABILITY])}")
    task = Task(
        id=row.ident("id"),
        task=kind,
        input=text,
        context=context,
        answers=row.strings("answers"),
        template=template,
        max_new_tokens=row.count("max_new_tokens", PARAMS["max_new_tokens"].high),
        chat=row.flag("chat", True),
        category=row.name("category", kind),
        metric=metric,  # None: by the task kind (scores.KIND_METRIC)
    )
    if row.given("test") or row.given("entry_point"):  # a HumanEval problem: `input` is its prompt
        missing = [
            k for k in ("test", "entry_point") if not isinstance(row.data.get(k), str) or not row.data[k].strip()
        ]
        if missing:
            raise row.error(f"a HumanEval-style task needs both test and entry_point (missing {', '.join(missing)})")
        task.metric, task.chat, task.stop = "pass@1", row.flag("chat", False), HUMANEVAL_STOP
        task.problem = {
            "task_id": task.id,
            "prompt": text,
            "test": row.text("test"),
            "entry_point": row.text("entry_point"),
        }
        task.max_new_tokens = task.max_new_tokens or HUMANEVAL_MAX_NEW_TOKENS
    return task


def any_task(row: Row) -> Task:
    """One line of a task file, whichever of the formats it is written in (decided per line)."""
    if "question_id" in row:
        return spec_bench_task(row)
    if "task_id" in row and "prompt" in row:
        return humaneval_task(row)
    if "task" not in row and "dataset" in row:
        name = longbench_name(row, row.data["dataset"])
        return longbench_task(row, name, line_id(row, name))
    return project_task(row)


def load_tasks(path: str | Path, categories: list[str] | None = None, limit: int | None = None) -> list[Task]:
    """Read a task file: the project's rows, Spec-Bench's question.jsonl, LongBench rows (with `dataset`)
    or HumanEval problems (task_id, prompt, test, entry_point), detected per row; `limit` applies per category."""
    path = Path(path)
    tasks = [any_task(row) for row in read_rows(path)]
    return select_subset(select_categories(tasks, categories, path.name), limit)
