"""Tasks: the project's task files (JSON Lines) and Spec-Bench's question.jsonl, as one Task type."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InvalidInputError

SPEC_BENCH_TASK = {"summarization": "summarization", "rag": "qa", "qa": "qa", "math_reasoning": "math", "translation": "translation"}


@dataclass
class Task:
    id: str
    task: str  # qa | summarization | code | chat | math | other
    input: str
    context: str | None = None
    answers: list[str] = field(default_factory=list)
    template: str | None = None
    max_new_tokens: int | None = None
    chat: bool = True  # apply the tokenizer's chat template when it has one
    category: str | None = None

    def prompt(self) -> str:
        """The text the model sees: the template filled, or the context followed by the input."""
        if self.template:
            return self.template.format(context=self.context or "", input=self.input)
        if self.context:
            return f"{self.context}\n\n{self.input}"
        return self.input


def _spec_bench_row(row: dict, where: str) -> Task:
    turns = row.get("turns")
    if not turns or not isinstance(turns, list):
        raise InvalidInputError(f"{where}: a Spec-Bench row needs a non-empty 'turns' list")
    ref = row.get("reference") or []
    if isinstance(ref, str):
        ref = [ref]
    cat = row.get("category", "other")
    # Only the first turn: the second of an MT-bench pair needs the model's own first answer.
    return Task(id=str(row["question_id"]), task=SPEC_BENCH_TASK.get(cat, "chat"), input=turns[0], answers=[str(r) for r in ref], category=cat)


def _task_row(row: dict, where: str) -> Task:
    missing = [k for k in ("id", "task") if not row.get(k)] + ([] if isinstance(row.get("input"), str) else ["input"])
    if missing:
        raise InvalidInputError(f"{where}: missing field(s) {', '.join(missing)} (a task needs id, task and input)")
    if not row["input"].strip() and not row.get("context"):
        raise InvalidInputError(f"{where}: both input and context are empty: there is nothing to prompt with")
    answers = row.get("answers") or []
    if isinstance(answers, str) or not all(isinstance(a, str) for a in answers):
        raise InvalidInputError(f"{where}: 'answers' must be a list of strings")
    template = row.get("template")
    if template is not None and "{input}" not in template:
        raise InvalidInputError(f"{where}: 'template' must contain {{input}}")
    mnt = row.get("max_new_tokens")
    if mnt is not None and (not isinstance(mnt, int) or mnt < 1):
        raise InvalidInputError(f"{where}: 'max_new_tokens' must be a positive integer")
    return Task(id=str(row["id"]), task=str(row["task"]), input=row["input"], context=row.get("context"), answers=list(answers),
                template=template, max_new_tokens=mnt, chat=bool(row.get("chat", True)), category=row.get("category", row["task"]))


def load_tasks(path: str | Path, categories: list[str] | None = None, limit: int | None = None) -> list[Task]:
    """Read a task file or Spec-Bench's question.jsonl (detected per row); `limit` applies per category."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"task file not found: {path}")
    tasks: list[Task] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{where}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise InvalidInputError(f"{where}: each line must be a JSON object")
        tasks.append(_spec_bench_row(row, where) if "question_id" in row else _task_row(row, where))
    if categories:
        known = sorted({t.category for t in tasks if t.category})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise InvalidInputError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} in {path.name}; known: {', '.join(known)}")
        tasks = [t for t in tasks if t.category in categories]
    if limit is not None:
        per: dict[str | None, int] = {}
        kept = []
        for t in tasks:
            if per.get(t.category, 0) < limit:
                per[t.category] = per.get(t.category, 0) + 1
                kept.append(t)
        tasks = kept
    return tasks
