"""The sample tasks bundled with the project (assets/samples.jsonl), in the project's task-file format."""

from __future__ import annotations

from pathlib import Path

from workbench.evaluation.tasks.task_file import load_tasks

SAMPLES = Path(__file__).resolve().parents[3] / "assets" / "samples.jsonl"


def load_samples(path: str | Path | None = None) -> list:
    return load_tasks(path or SAMPLES)
