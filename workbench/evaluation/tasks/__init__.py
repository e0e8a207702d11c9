"""Tasks: one Task type (task.py), one row validator (rows.py) and one loader per dataset: the project's
task files (task_file.py), Spec-Bench (spec_bench.py), LongBench (longbench.py), HumanEval (humaneval.py),
GSM8K (gsm8k.py) and the bundled samples (samples.py); `load_dataset_tasks` (datasets.py) is the single
entry point that names them. Prompt templates fill {context} and {input} by name only (`fill_template`):
nothing in them is evaluated. The names callers use are importable from here."""

from workbench.evaluation.tasks.datasets import DATASETS, load_dataset_tasks, load_many, parse_data_spec
from workbench.evaluation.tasks.gsm8k import GSM8K_TEMPLATE, load_gsm8k
from workbench.evaluation.tasks.humaneval import HUMANEVAL_MAX_NEW_TOKENS, load_humaneval
from workbench.evaluation.tasks.longbench import LONGBENCH, LongBenchSet, load_longbench_file, load_longbench_hub
from workbench.evaluation.tasks.rows import MAX_TASK_FILE_BYTES, Row, read_rows, select_categories, select_subset
from workbench.evaluation.tasks.samples import SAMPLES, load_samples
from workbench.evaluation.tasks.spec_bench import ROOT, SPEC_BENCH, SPEC_BENCH_TASK, load_spec_bench
from workbench.evaluation.tasks.task import (
    TEMPLATE_FIELDS,
    Task,
    check_template,
    compress_prompt,
    fill_template,
    middle_truncate,
    prompt_parts,
)
from workbench.evaluation.tasks.task_file import load_tasks

__all__ = [
    "DATASETS",
    "GSM8K_TEMPLATE",
    "HUMANEVAL_MAX_NEW_TOKENS",
    "LONGBENCH",
    "MAX_TASK_FILE_BYTES",
    "ROOT",
    "SAMPLES",
    "SPEC_BENCH",
    "SPEC_BENCH_TASK",
    "TEMPLATE_FIELDS",
    "LongBenchSet",
    "Row",
    "Task",
    "check_template",
    "compress_prompt",
    "fill_template",
    "load_dataset_tasks",
    "load_gsm8k",
    "load_humaneval",
    "load_longbench_file",
    "load_longbench_hub",
    "load_many",
    "load_samples",
    "load_spec_bench",
    "load_tasks",
    "middle_truncate",
    "parse_data_spec",
    "prompt_parts",
    "read_rows",
    "select_categories",
    "select_subset",
]
