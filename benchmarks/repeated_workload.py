"""A workload that repeats itself, from data every machine has (issue 35): the requests suffix speculation
is for, where a model says again what it said before.

- Spec-Bench: `--per-category` prompts of each of its 13 categories (first turn), issued in a random order
  (round 1), then all of them again in a new random order (round 2).
- Code edits of standard-library functions: round 1 asks for a function from its signature and docstring
  (taken from the standard library's source with `inspect`); round 2 shows the first request's output and
  asks for a small change to it (rename the function, add type hints, ...). Round 2's prompt therefore
  depends on round 1's output: the row holds a template with `{previous}`, which the benchmark fills with
  greedy's round-1 output (lossless methods produce the same output, so every method sees one prompt).

    python benchmarks/repeated_workload.py [--per-category 1] [--code 6] [--seed 0] [--out results/repeated.jsonl]

Each row: id, category (Spec-Bench's, or `code-edit`), round (1 or 2), item (the request it repeats or
edits: the same for both rounds), input (round 2 of a code edit: a template with {previous}), follows
(round 2 of a code edit: the id of its round-1 row), max_new_tokens (none: the benchmark's).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"

# Small pure functions of the standard library whose source inspect can read (not C builtins).
CODE_FUNCTIONS = [
    "colorsys.rgb_to_hsv",
    "base64.urlsafe_b64encode",
    "shlex.quote",
    "textwrap.indent",
    "calendar.leapdays",
    "string.capwords",
    "statistics.median",
    "html.escape",
    "colorsys.rgb_to_yiq",
    "calendar.isleap",
    "fnmatch.filter",
    "statistics.mode",
]
EDITS = [
    "Rename the function to `{name}_v2` and change nothing else.",
    "Add type hints to its parameters and return value and change nothing else.",
    "Add a one-line comment above its first statement and change nothing else.",
    "Rename its first parameter to `value` everywhere and change nothing else.",
]


def function_stub(path: str) -> tuple[str, str]:
    """(name, `def name(signature):` with its docstring's first line) of a standard-library function."""
    module, name = path.rsplit(".", 1)
    fn = getattr(importlib.import_module(module), name)
    source = inspect.getsource(fn)
    header = source.split(":\n", 1)[0].strip()  # `def name(args)` up to the colon ending the signature line(s)
    doc = (inspect.getdoc(fn) or "").split("\n\n", 1)[0].replace("\n", " ").strip()
    return name, f'{header}:\n    """{doc}"""'


def spec_bench_rows(path: Path, per_category: int, categories: list[str] | None = None) -> list[dict]:
    if not path.is_file():
        raise SystemExit(f"Spec-Bench's question.jsonl is not at {path}: pass --spec-bench PATH")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out, seen = [], {}
    for r in rows:
        cat = r["category"]
        if categories and cat not in categories:
            continue
        if seen.get(cat, 0) < per_category:
            seen[cat] = seen.get(cat, 0) + 1
            out.append({"item": f"{cat}-{r['question_id']}", "category": cat, "input": r["turns"][0]})
    return out


def build_workload(
    spec_bench: Path = SPEC_BENCH,
    per_category: int = 1,
    code: int = 6,
    seed: int = 0,
    categories: list[str] | None = None,
    code_offset: int = 0,
) -> list[dict]:
    """Round 1 (first sight) then round 2 (repeats, edits), each in its own random order; `categories`
    keeps only those Spec-Bench categories (None: all 13); the code edits are CODE_FUNCTIONS[code_offset:][:code]
    (an offset gives items disjoint from a reported run's, for fitting)."""
    rng = random.Random(seed)
    first = [dict(r, round=1, id=f"{r['item']}@1") for r in spec_bench_rows(spec_bench, per_category, categories)]
    second = [dict(r, round=2, id=f"{r['item']}@2") for r in first]
    if not 0 <= code_offset <= len(CODE_FUNCTIONS):
        raise ValueError(f"code_offset must lie in 0..{len(CODE_FUNCTIONS)} (got {code_offset})")
    for i, path in enumerate(CODE_FUNCTIONS[code_offset:][:code], start=code_offset):
        name, stub = function_stub(path)
        item = f"code-{path}"
        first.append(
            {
                "item": item,
                "category": "code-edit",
                "round": 1,
                "id": f"{item}@1",
                "input": f"Write the complete Python function below (body included):\n\n```python\n{stub}\n```",
            }
        )
        edit = EDITS[i % len(EDITS)].format(name=name)
        second.append(
            {
                "item": item,
                "category": "code-edit",
                "round": 2,
                "id": f"{item}@2",
                "follows": f"{item}@1",
                "input": "Here is a Python function:\n\n{previous}\n\n" + edit + " Write the whole function.",
            }
        )
    rng.shuffle(first)
    rng.shuffle(second)
    return first + second


def prompt_of(row: dict, previous: dict[str, str]) -> str:
    """The request's text: round 2 of a code edit gets its round-1 output (`previous[follows]`)."""
    follows = row.get("follows")
    if follows is None:
        return row["input"]
    if follows not in previous:
        raise ValueError(f"{row['id']} edits the output of {follows}, which has not run yet")
    return row["input"].replace("{previous}", previous[follows])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec-bench", type=Path, default=SPEC_BENCH)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--code", type=int, default=6, help=f"code-edit items (at most {len(CODE_FUNCTIONS)})")
    ap.add_argument("--categories", default="", help="comma-separated Spec-Bench categories (default: all 13)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "repeated.jsonl")
    a = ap.parse_args(argv)
    rows = build_workload(
        a.spec_bench,
        a.per_category,
        min(a.code, len(CODE_FUNCTIONS)),
        a.seed,
        [c for c in a.categories.split(",") if c] or None,
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(
        f"{len(rows)} requests ({sum(r['round'] == 1 for r in rows)} first sight, "
        f"{sum(r['round'] == 2 for r in rows)} repeats or edits) -> {a.out}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
