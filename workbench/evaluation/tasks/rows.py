"""Reading JSON Lines task files and checking their rows: the one validator every dataset loader uses.

Every field a loader takes goes through `Row`, which checks its type (an id is a string or an integer,
a category a string, answers strings, a flag a boolean), that text is valid Unicode (no lone surrogate:
JSON's "\\ud800" parses, but no tokenizer takes it) and no longer than a prompt may be, and names the file
and line in every error. Nothing from a row reaches a tokenizer, a hash table or the store unchecked.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError
from core.files import MAX_PROMPT_CHARS, MiB, check_text, iter_lines, parse_json

# The largest task file read (LongBench's longest English set is about 40 MB; the rows are parsed and held).
MAX_TASK_FILE_BYTES = 512 * MiB
_MISSING = object()


class Row:
    """One JSON object of a task file with `where` (file and line) for its error messages."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data, self.where = data, where

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def given(self, key: str) -> bool:
        """The field is present and not null."""
        return self.data.get(key) is not None

    def error(self, message: str) -> InvalidInputError:
        return InvalidInputError(f"{self.where}: {message}")

    def require_text(self, *keys: str, nonblank: bool = False, what: str = "") -> None:
        """Every one of `keys` present as a string (`nonblank`: not only blanks), else one error naming all that are not."""
        missing = [k for k in keys if not isinstance(self.data.get(k), str) or (nonblank and not self.data[k].strip())]
        if missing:
            raise self.error(f"missing field(s) {', '.join(missing)}{what}")

    def text(self, key: str, *, required: bool = True, nonblank: bool = False, what: str = "") -> str | None:
        """A string field (checked Unicode, at most a prompt's length); None when absent and not required."""
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.error(f"missing field {key}{what}")
            return None
        if not isinstance(value, str):
            raise self.error(f"'{key}' must be a string, not {_kind(value)}")
        if nonblank and not value.strip():
            raise self.error(f"'{key}' is empty{what}")
        return check_text(value, what=f"{self.where}: '{key}'", max_chars=MAX_PROMPT_CHARS)

    def ident(self, *keys: str, fallback: str | None = None) -> str:
        """The first of `keys` present as a string or an integer, as a string (else `fallback`)."""
        for key in keys:
            value = self.data.get(key)
            if value is None or value == "":
                continue
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise self.error(f"'{key}' must be a string or an integer, not {_kind(value)}")
            text = check_text(str(value), what=f"{self.where}: '{key}'")
            if len(text) > 1000:
                raise self.error(f"'{key}' has {len(text):,} characters: an id may have at most 1,000")
            return text
        if fallback is None:
            raise self.error(f"missing field {' or '.join(keys)}")
        return fallback

    def strings(self, key: str) -> list[str]:
        """A list of strings (absent or null: empty)."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"'{key}' must be a list of strings")
        return [check_text(v, what=f"{self.where}: '{key}'", max_chars=MAX_PROMPT_CHARS) for v in value]

    def references(self, key: str) -> list[str]:
        """Reference answers: a string, or a list of strings and numbers, nested lists flattened (Spec-Bench's rag rows)."""
        out: list[str] = []

        def add(value: Any, depth: int) -> None:
            if isinstance(value, str):
                out.append(check_text(value, what=f"{self.where}: '{key}'", max_chars=MAX_PROMPT_CHARS))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(str(value))
            elif isinstance(value, list) and depth < 4:
                for item in value:
                    add(item, depth + 1)
            else:
                raise self.error(f"'{key}' must be a string or a list of strings")

        value = self.data.get(key)
        if value is not None:
            add(value, 0)
        return out

    def count(self, key: str, high: int) -> int | None:
        """A positive integer up to `high` (absent or null: None)."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise self.error(f"'{key}' must be a positive integer of at most {high}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """true/false (or 1/0); absent or null: `default`."""
        value = self.data.get(key)
        if value is None:
            return default
        if value in (True, False) and isinstance(value, (bool, int)):
            return bool(value)
        raise self.error(f"'{key}' must be true or false")

    def name(self, key: str, default: str | None = None) -> str | None:
        """A short label such as a category: a string of at most 200 characters."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"'{key}' must be a non-empty string, not {_kind(value)}")
        if len(value) > 200:
            raise self.error(f"'{key}' has {len(value):,} characters: a name may have at most 200")
        return check_text(value, what=f"{self.where}: '{key}'")


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "a string",
    }.get(type(value), type(value).__name__)


def read_rows(path: str | Path, *, what: str = "task file", gunzip: bool = False) -> Iterator[Row]:
    """Each non-empty line of a JSON Lines file as a Row; the file read safely (core.files: no folder, FIFO
    or device, at most MAX_TASK_FILE_BYTES, UTF-8) and every bad line named."""
    path = Path(path)
    for number, line in iter_lines(path, what=what, max_bytes=MAX_TASK_FILE_BYTES, gunzip=gunzip):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        data = parse_json(line, where=where)
        if not isinstance(data, dict):
            array = (
                " (this line is a JSON array: write each task on its own line, JSON Lines)"
                if isinstance(data, list)
                else ""
            )
            raise InvalidInputError(f"{where}: each line must be a JSON object{array}")
        yield Row(data, where)


def line_id(row: Row, prefix: str) -> str:
    """`prefix-N` for a row without an id: N is its line number."""
    return f"{prefix}-{row.where.rsplit(' ', 1)[-1]}"


def select_categories(tasks: list, categories: Sequence[str] | None, source: str) -> list:
    if not categories:
        return tasks
    known = sorted({t.category for t in tasks if t.category})
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise InvalidInputError(
            f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} in {source}; "
            f"known: {', '.join(known)}"
        )
    return [t for t in tasks if t.category in categories]


def select_subset(tasks: list, limit: int | None, seed: int | None = None) -> list:
    """At most `limit` tasks per category: the first ones, or a sample drawn with `seed` (kept in file order)."""
    if limit is None:
        return tasks
    if limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    by_cat: dict[str | None, list[int]] = {}
    for i, t in enumerate(tasks):
        by_cat.setdefault(t.category, []).append(i)
    keep: set[int] = set()
    for indices in by_cat.values():
        if seed is None or len(indices) <= limit:
            keep.update(indices[:limit])
        else:
            keep.update(random.Random(seed).sample(indices, limit))
    return [t for i, t in enumerate(tasks) if i in keep]
