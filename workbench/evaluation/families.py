"""Task families for settings that must hold across tasks (docs/AUTOMATIC_SETTINGS.md, "Task families").

Each family has a held-out split (what a fit may look at) and an evaluation split (what reports show),
disjoint by construction; `family_tasks(name, split)` returns either as tasks whose category is the
family's name, so a benchmark groups its results by family. Families:

- `docqa`: extractive QA over long documentation passages (built: workbench.evaluation.built_tasks);
- `summarization`, `rag`: Spec-Bench's categories; the first BENCHMARK_ITEMS evaluate, the rest are held out;
- `code`: next-line completion over long source files (built);
- `writing`: open-ended writing; evaluation: Spec-Bench's writing and roleplay questions and more ShareGPT
  writing requests, held out: the first ShareGPT writing requests; scored by the target's own probability
  of what was written (scores.mean_target_probability), since no reference exists;
- `humaneval`, `gsm8k` (not in DEFAULT_FAMILIES): items beyond the first BENCHMARK_ITEMS are held out.

Built rows are written once per Python version to `<home>/families/` and read back with the LongBench
loader, so what was fitted on can be inspected and re-read (`benchmarks/build_families.py` writes them
anywhere else).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError
from workbench.evaluation.calibration import BENCHMARK_ITEMS, Overlap, benchmark_texts, prompt_hash, sharegpt_prompts
from workbench.evaluation.scores import TARGET_PROBABILITY, mean_target_probability, score_task
from workbench.evaluation.tasks import SPEC_BENCH, Task, load_dataset_tasks, load_longbench_file

SPLITS = ("held_out", "evaluation")
BUILT_COUNTS = {"held_out": 60, "evaluation": 40}  # items per split of a built family
BUILD_VERSION = 1  # bump when built_tasks changes what it writes: old files are then built again
WRITING_ITEMS = {"held_out": 40, "evaluation_sharegpt": 20}  # ShareGPT writing requests per split
WRITING_SPEC_BENCH = "spec-bench:writing,roleplay"
_WRITING_REQUEST = re.compile(
    r"^\s*(please\s+)?(write|compose)\s+(me\s+)?(a|an)\s+((short|brief|funny|creative|formal)\s+)*"
    r"(story|poem|essay|letter|email|blog post|article|speech|song|paragraph|description|review|dialogue|scene|"
    r"limerick|haiku|cover letter|bio|tweet)\b",
    re.IGNORECASE,
)
# Requests for code, or that refer to text the first turn does not hold, are not open-ended writing.
_NOT_WRITING = re.compile(
    r"code|function|script|program|sql|python|javascript|regex|html|css|```|\bapi\b|"
    r"\b(this|the following|above|below|attached)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # what the task is
    metric: str  # how an output is scored (×100)
    source: str  # where the items come from and how they split
    needs_execution: bool = False  # scored by running the model's code (HumanEval pass@1, in the sandbox)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "docqa",
            "extractive QA over long documentation passages (1.5k-6k tokens)",
            "token F1 (qa_f1)",
            f"built from the standard library's docstrings, {BUILT_COUNTS['held_out']} held out and "
            f"{BUILT_COUNTS['evaluation']} evaluated, from disjoint modules",
        ),
        Family(
            "summarization",
            "news summarization (CNN/DailyMail)",
            "ROUGE-L (rouge_l)",
            f"Spec-Bench summarization: items {BENCHMARK_ITEMS}+ held out, the first {BENCHMARK_ITEMS} evaluated",
        ),
        Family(
            "rag",
            "question answering over retrieved passages",
            "token F1 (qa_f1)",
            f"Spec-Bench rag: items {BENCHMARK_ITEMS}+ held out, the first {BENCHMARK_ITEMS} evaluated",
        ),
        Family(
            "code",
            "next-line code completion over long source files (LCC)",
            "edit similarity (code_sim)",
            f"built from the standard library's source, {BUILT_COUNTS['held_out']} held out and "
            f"{BUILT_COUNTS['evaluation']} evaluated, from disjoint modules",
        ),
        Family(
            "writing",
            "open-ended writing",
            "the target's mean probability of the written tokens",
            f"held out: the first {WRITING_ITEMS['held_out']} ShareGPT writing requests; evaluated: Spec-Bench writing "
            f"and roleplay and the next {WRITING_ITEMS['evaluation_sharegpt']} ShareGPT writing requests",
        ),
        Family(
            "humaneval",
            "Python function completion",
            "pass@1 (sandboxed execution)",
            f"HumanEval: problems {BENCHMARK_ITEMS}+ held out, the first {BENCHMARK_ITEMS} evaluated",
            needs_execution=True,
        ),
        Family(
            "gsm8k",
            "grade-school math word problems",
            "final-number accuracy",
            f"Spec-Bench math_reasoning (GSM8K): items {BENCHMARK_ITEMS}+ held out, the first {BENCHMARK_ITEMS} evaluated",
        ),
    )
}
DEFAULT_FAMILIES = ("docqa", "summarization", "rag", "code", "writing")


def _check(name: str, split: str) -> None:
    if name not in FAMILIES:
        raise InvalidInputError(f"unknown task family {name!r}; known: {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise InvalidInputError(f"unknown split {split!r}: held_out (for fitting) or evaluation (for reporting)")


def parse_families(
    text: str | None, known: Sequence[str] = tuple(FAMILIES), default: Sequence[str] = DEFAULT_FAMILIES, where: str = ""
) -> tuple[str, ...]:
    """`"docqa,rag"` -> ("docqa", "rag"); empty or None -> `default`; names not in `known` (the project's families,
    or a task file's, `where` naming it) are one error."""
    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip())) or tuple(default)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidInputError(
            f"unknown task famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}"
            f"{' in ' + where if where else ''}; known: {', '.join(known)}"
        )
    return names


# ---------------------------------------------------------------- built families (docqa, code)


def built_path(name: str, split: str) -> Path:
    from core.models import workbench_home

    python = "py" + sys.version.split()[0]
    return workbench_home() / "families" / f"v{BUILD_VERSION}-{python}" / f"{name}-{split}.jsonl"


def write_rows(rows: Iterable[Mapping[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return path


def _built(name: str, split: str) -> list[Task]:
    from workbench.evaluation.built_tasks import BUILDERS

    path = built_path(name, split)
    if not path.exists():
        write_rows(BUILDERS[name](split, BUILT_COUNTS[split]), path)
    return load_longbench_file(path)


# ---------------------------------------------------------------- writing


@functools.lru_cache(maxsize=2)
def writing_requests(limit: int) -> tuple[Task, ...]:
    """The first `limit` ShareGPT first turns that ask for a piece of writing (a story, poem, essay, letter...),
    English, 30-600 characters, none sharing a word 13-gram with another or with a benchmark text."""
    seen = Overlap.of(benchmark_texts(SPEC_BENCH if SPEC_BENCH.exists() else None))
    hashes: set[str] = set()
    out: list[Task] = []
    for prompt in sharegpt_prompts(max_chars=600):
        text = prompt.text.strip()
        if len(out) >= limit:
            break
        if len(text) < 30 or not text.isascii() or not _WRITING_REQUEST.match(text) or _NOT_WRITING.search(text):
            continue
        if prompt_hash(text) in hashes or seen.hits(text):
            continue
        hashes.add(prompt_hash(text))
        mine = Overlap.of([text])
        seen.grams |= mine.grams
        seen.whole |= mine.whole
        out.append(Task(id=f"sharegpt-{prompt.id}", task="chat", input=text, category="writing"))
    if len(out) < limit:
        raise InvalidInputError(f"only {len(out)} ShareGPT writing requests found (wanted {limit})")
    return tuple(out)  # read once per process (the corpus takes seconds to scan); family_tasks copies the tasks


def _writing(split: str) -> list[Task]:
    held = WRITING_ITEMS["held_out"]
    requests = writing_requests(held + WRITING_ITEMS["evaluation_sharegpt"])
    if split == "held_out":
        return list(requests[:held])
    return load_dataset_tasks(WRITING_SPEC_BENCH) + list(requests[held:])


# ---------------------------------------------------------------- one entry point


def _benchmark_split(spec: str, split: str) -> list[Task]:
    tasks = load_dataset_tasks(spec)
    return tasks[BENCHMARK_ITEMS:] if split == "held_out" else tasks[:BENCHMARK_ITEMS]


_LOADERS: dict[str, Callable[[str], list[Task]]] = {
    "docqa": lambda split: _built("docqa", split),
    "code": lambda split: _built("code", split),
    "summarization": lambda split: _benchmark_split("spec-bench:summarization", split),
    "rag": lambda split: _benchmark_split("spec-bench:rag", split),
    "writing": _writing,
    "humaneval": lambda split: _benchmark_split("humaneval", split),
    "gsm8k": lambda split: _benchmark_split("gsm8k", split),
}


def family_tasks(name: str, split: str, limit: int | None = None) -> list[Task]:
    """The family's items of one split (the first `limit`), each with the family's name as its category."""
    _check(name, split)
    if limit is not None and limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    tasks = _LOADERS[name](split)[:limit]
    if not tasks:
        raise InvalidInputError(f"the {name} family has no {split} items here")
    return [dataclasses.replace(t, category=name) for t in tasks]


def load_families(names: Sequence[str], split: str, limit: int | None = None) -> dict[str, list[Task]]:
    return {n: family_tasks(n, split, limit) for n in names}


def item_ids(tasks_by_family: Mapping[str, Sequence[Task]]) -> dict[str, list[str]]:
    """What a fit stores to name its items: the task ids per family."""
    return {family: [t.id for t in tasks] for family, tasks in tasks_by_family.items()}


def item_text(task: Task) -> str:
    """The item's own text: its context where it has one (the question and the prompt template around it are
    phrased alike across items), else its input."""
    return task.context or task.input


def split_overlap(name: str) -> dict[str, list[str]]:
    """Evaluation items of a family that share an id, or a word 13-gram of their text, with a held-out item
    (both lists should be empty: the splits are disjoint by construction, and this checks it)."""
    held, evaluated = family_tasks(name, "held_out"), family_tasks(name, "evaluation")
    held_ids = {t.id for t in held}
    seen = Overlap.of(item_text(t) for t in held)
    return {
        "ids": [t.id for t in evaluated if t.id in held_ids],
        "text": [t.id for t in evaluated if seen.hits(item_text(t))],
    }


def evaluation_texts(names: Sequence[str] = tuple(FAMILIES)) -> list[str]:
    """The families' evaluation items' own text: what a calibration corpus must not contain."""
    return [item_text(t) for n in names for t in family_tasks(n, "evaluation")]


def scored_by_probability(task: Task) -> bool:
    """Whether the task is scored by the target's own probability of what was written, read from the run's
    steps: its metric says so (a task file's family), or it is the writing family's and names no other."""
    return task.metric == TARGET_PROBABILITY or (task.metric is None and task.category == "writing")


def family_score(
    task: Task,
    output_text: str,
    steps=None,
    *,
    execute_code: bool = False,
    timeout: float = 10.0,
    unsafe_exec: bool = False,
) -> float | None:
    """One output's score ×100 in its family's metric: writing reads the run's steps (the target's own
    probabilities); the others compare the text with the references (or run HumanEval's tests)."""
    if scored_by_probability(task):
        return None if steps is None else mean_target_probability(steps)
    return score_task(task, output_text, execute_code=execute_code, timeout=timeout, unsafe_exec=unsafe_exec)
