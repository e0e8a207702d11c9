"""The CSV export format: runs.csv, steps.csv and nodes.csv, one column per table column.

Values are written so they read back to the same value (floats by repr, JSON sorted and compact,
datetimes to the microsecond); an empty field is null. Reading checks every value, and every step and
node against its run and step, before the store writes anything.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, DateTime, Double, Integer, select
from sqlalchemy.orm import Session

from core.errors import InvalidInputError
from core.files import open_text
from core.token_text import spoken_reason
from core.trace import DECISIONS, SOURCES, STATUSES
from workbench.store.errors import CsvFormatError
from workbench.store.rows import chunks
from workbench.store.schema import Node, Run, Step

CSV_TABLES = {"runs": Run.__table__, "steps": Step.__table__, "nodes": Node.__table__}
# Values a column must take, checked on import.
CSV_CHOICES = {("runs", "status"): STATUSES, ("nodes", "source"): SOURCES, ("nodes", "decision"): DECISIONS}
CSV_JSON_KINDS = {
    ("runs", "params"): dict,
    ("runs", "tags"): list,
    ("runs", "prompt_ids"): list,
    ("runs", "output_ids"): list,
    ("steps", "emitted"): list,
    ("runs", "metrics"): dict,
    ("runs", "attributes"): dict,
    ("steps", "attributes"): dict,
    ("nodes", "attributes"): dict,
    ("runs", "external_accept_lengths"): list,
}
# JSON lists whose items must be integers (token ids, lengths) or strings (tags).
CSV_LIST_ITEMS = {
    ("runs", "prompt_ids"): int,
    ("runs", "output_ids"): int,
    ("steps", "emitted"): int,
    ("runs", "external_accept_lengths"): int,
    ("runs", "tags"): str,
}
INT64 = (-(2**63), 2**63 - 1)  # what SQLite and PostgreSQL's BIGINT hold
MAX_JSON_DEPTH = 32
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection): text cells that
# do are written with a leading apostrophe, which reading removes again (as does one before an apostrophe).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Python's csv refuses fields over 131,072 characters by default; a long prompt or context is longer.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


# Columns written for a person and ignored on import (an export without them imports too): a node's reason with
# its correction token named by text (core.token_text), beside `reason` as stored ("correction 504") and the id in
# `correction_id`, which a re-import keeps byte for byte.
# A run's `method_label` is the method as the app lists it (`aasd[auto]` for fitted thresholds: core.methods.spec.
# asked_as) beside `method`, the plain name import reads.
DERIVED = {"nodes": {"reason_text": "reason"}, "runs": {"method_label": "method"}}  # column -> written after
# Nullable columns a later schema revision added: an export made before them imports, the column left null.
ADDED_LATER = {"runs": ("decode_cpu_seconds",)}


def csv_columns(name: str, derived: bool = True) -> list[str]:
    """The header of `name`.csv: the table's columns, `id` written as `run_id`, and `tags` for runs; with `derived`,
    the DERIVED columns after the ones they read."""
    cols = [c.name for c in CSV_TABLES[name].columns]
    if name == "runs":
        cols = ["run_id" if c == "id" else c for c in cols] + ["tags"]
    if derived:
        for col, after in DERIVED.get(name, {}).items():
            cols.insert(cols.index(after) + 1, col)
    return cols


def _token_texts(session: Session, run_ids: Sequence[int]) -> dict[int, dict[int, str]]:
    """run id -> {token id: text} from the runs' node records: what a reason's correction id is named by."""
    out: dict[int, dict[int, str]] = {}
    rows = session.execute(
        select(Node.run_id, Node.token_id, Node.token_text).where(Node.run_id.in_(run_ids)).distinct()
    )
    for run_id, token_id, text in rows:
        out.setdefault(run_id, {})[token_id] = text
    return out


def table_type(name: str, column: str) -> str:
    if name == "runs" and column in ("run_id", "tags"):
        return "int" if column == "run_id" else "json"
    if column in DERIVED.get(name, {}):
        return "text"
    t = CSV_TABLES[name].c[column].type
    if isinstance(t, JSON):
        return "json"
    if isinstance(t, Double):
        return "float"
    if isinstance(t, Integer):
        return "int"
    if isinstance(t, DateTime):
        return "datetime"
    return "text"


def escape_formula(text: str) -> str:
    """`=1+1` -> `'=1+1` (and `'=x` -> `''=x`, so reading gives back exactly what was written)."""
    if text[:1] in FORMULA_START or (text[:1] == "'" and text[1:2] in (*FORMULA_START, "'")):
        return "'" + text
    return text


def unescape_formula(text: str) -> str:
    if text[:1] == "'" and text[1:2] in (*FORMULA_START, "'"):
        return text[1:]
    return text


def _format(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "text":
        return escape_formula(str(value))
    if kind == "json":
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if kind == "float":
        return repr(float(value))  # the shortest text that reads back to the same double
    if kind == "datetime":
        return value.isoformat(timespec="microseconds")
    return str(value)


def _parse(kind: str, raw: str, nullable: bool) -> Any:
    if raw == "" and (nullable or kind != "text"):
        if not nullable:
            raise ValueError("is empty but required")
        return None
    if kind == "int":
        try:
            value = int(raw.strip()) if raw.strip().lstrip("+-").isdigit() and len(raw) < 30 else None
        except ValueError:
            value = None
        if value is None:
            raise ValueError("is not an integer")
        if not INT64[0] <= value <= INT64[1]:
            raise ValueError("is outside the 64-bit integer range")
        return value
    if kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("is not a number") from None
        if math.isnan(value):  # SQLite keeps NaN as NULL: refused rather than changed
            raise ValueError("is NaN, which the store cannot keep (leave the field empty for no value)")
        return value
    if kind == "json":
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"is not valid JSON ({e.msg} at character {e.pos})") from None
        except RecursionError:
            raise ValueError(f"is JSON nested too deeply (at most {MAX_JSON_DEPTH} levels)") from None
        _check_json(value)
        return value
    if kind == "datetime":
        try:
            value = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError("is not an ISO date-time (YYYY-MM-DDTHH:MM:SS[.ffffff][+HH:MM])") from None
        if value.tzinfo is not None:  # the store keeps UTC without an offset
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value
    return unescape_formula(raw)


def _check_json(value: Any, depth: int = 0) -> None:
    """JSON the store can keep: limited nesting, integers in 64 bits, finite numbers."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"is JSON nested too deeply (at most {MAX_JSON_DEPTH} levels)")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if not INT64[0] <= value <= INT64[1]:
            raise ValueError("holds an integer outside the 64-bit range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("holds NaN or an infinity, which JSON does not allow")
    elif isinstance(value, list):
        for v in value:
            _check_json(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _check_json(v, depth + 1)


# ---------------------------------------------------------------- writing


def write_csv(
    session: Session, run_ids: Sequence[int], tags: Mapping[int, list[str]], out: Path, *, force: bool = False
) -> dict[str, Path]:
    """Write runs.csv, steps.csv and nodes.csv for these (existing) runs into `out`: all three checked first
    (an existing file is replaced only with `force`; a symbolic link, FIFO or device never), each written
    beside its name and renamed when complete (core.files.replacing)."""
    from core.files import check_output, replacing
    from core.methods import asked_as  # the registry's defaults name a variant; here, so reading CSV loads no torch

    paths = {name: out / f"{name}.csv" for name in CSV_TABLES}
    for path in paths.values():
        check_output(path, what="--out", force=force)
    for name, table in CSV_TABLES.items():
        cols = csv_columns(name)
        with replacing(paths[name], what="--out", force=force) as f:
            w = csv.writer(f, lineterminator="\n")
            # csv quotes a field holding "\n" but not one holding a bare "\r", which no reader then reads
            # back whole: such rows are written with every field quoted (the values read back the same).
            quoted = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_ALL)
            w.writerow(cols)
            key = table.c.id if name == "runs" else table.c.run_id
            order = list(table.primary_key.columns)
            for chunk in chunks(run_ids, 500):
                texts = _token_texts(session, chunk) if name == "nodes" else {}
                for row in session.execute(select(table).where(key.in_(chunk)).order_by(*order)):
                    m = dict(row._mapping)
                    if name == "runs":
                        m["run_id"] = m.pop("id")
                        m["tags"] = tags.get(m["run_id"], [])
                        m["method_label"] = asked_as(m["method"], m["params"])
                    if name == "nodes":
                        known = texts.get(m["run_id"], {})
                        m["reason_text"] = spoken_reason(m["reason"], lambda t: known.get(t, f"⟨{t}⟩"))
                    values = [_format(table_type(name, c), m[c]) for c in cols]
                    (quoted if any("\r" in v for v in values) else w).writerow(values)
    return paths


# ---------------------------------------------------------------- reading

CSV_BYTES = 64 << 30  # the largest CSV file imported (nodes.csv of a very large store); it is streamed, not held


def _read_table(path: Path, name: str) -> list[dict[str, Any]]:
    if not path.exists() and not path.is_symlink():
        raise CsvFormatError(f"{path} is missing: an export folder holds runs.csv, steps.csv and nodes.csv")
    try:
        return _read_rows(path, name)
    except CsvFormatError:
        raise
    except InvalidInputError as e:  # core.files: a folder, FIFO, device, or over the cap
        raise CsvFormatError(f"{e}; nothing was imported") from None
    except UnicodeDecodeError as e:
        raise CsvFormatError(
            f"{path.name} is not UTF-8 text (byte {e.start}): export again, or save it as UTF-8; nothing was imported"
        ) from None
    except csv.Error as e:
        raise CsvFormatError(f"{path.name}: not a readable CSV file ({e}); nothing was imported") from None
    except OSError as e:
        raise CsvFormatError(
            f"cannot read {path.name}: {e.strerror or type(e).__name__}; nothing was imported"
        ) from None


def _read_rows(path: Path, name: str) -> list[dict[str, Any]]:
    cols = csv_columns(name)
    table = CSV_TABLES[name]
    rows = []
    with open_text(path, what=f"{name}.csv", max_bytes=CSV_BYTES, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        earlier = [c for c in cols if c not in ADDED_LATER.get(name, ())]
        # written before the derived columns were, or before a later revision's columns were
        if header in (
            csv_columns(name, derived=False),
            earlier,
            [c for c in earlier if c not in DERIVED.get(name, {})],
        ):
            cols = header
        if header != cols:
            missing = [c for c in cols if c not in (header or [])]
            extra = [c for c in (header or []) if c not in cols]
            # Unknown column names are shown only when they look like column names: the "header" may be
            # the first line of any file, and its contents are not repeated back.
            named = all(len(c) <= 40 and c.replace("_", "").isalnum() and c.isascii() for c in extra)
            raise CsvFormatError(
                f"{path.name}: the header does not match this schema"
                + (f"; missing columns {missing}" if missing else "")
                + ((f"; unknown columns {extra}" if named else f"; {len(extra)} unknown columns") if extra else "")
                + ("; columns out of order" if not missing and not extra else "")
            )
        # What each column takes, worked out once per file rather than once per cell.
        specs = []
        for col in cols:
            if col in DERIVED.get(name, {}):
                specs.append((col, None, "text", True, None, None, None))
                continue
            db_col = "id" if (name == "runs" and col == "run_id") else col
            nullable = col != "tags" and table.c[db_col].nullable and not table.c[db_col].primary_key
            specs.append(
                (
                    col,
                    db_col,
                    table_type(name, col),
                    nullable,
                    CSV_CHOICES.get((name, col)),
                    CSV_JSON_KINDS.get((name, col)),
                    CSV_LIST_ITEMS.get((name, col)),
                )
            )
        # Rows are counted as a spreadsheet shows them (the header is row 1); a quoted field may span lines.
        for line, values in enumerate(reader, start=2):
            if len(values) != len(cols):
                raise CsvFormatError(f"{path.name} row {line}: {len(values)} fields, expected {len(cols)}")
            row = {}
            for (col, db_col, kind_of_col, nullable, choices, kind, item), raw in zip(specs, values):
                try:
                    value = _parse(kind_of_col, raw, nullable)
                    if choices and value not in choices:
                        raise ValueError(f"must be one of {', '.join(choices)}")
                    if kind and value is not None and not isinstance(value, kind):
                        raise ValueError(f"must be a JSON {'object' if kind is dict else 'list'}")
                    if item and value and not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
                        raise ValueError(f"must be a JSON list of {'integers' if item is int else 'strings'}")
                except ValueError as e:  # the value itself is not echoed: the file may be anything
                    raise CsvFormatError(
                        f"{path.name} row {line}, column {col!r}: {e} (a value of {len(raw):,} "
                        f"characters, not repeated here); nothing was imported"
                    ) from None
                if db_col is not None:  # a derived column is not stored
                    row[db_col] = value
            row["_line"] = line
            rows.append(row)
    return rows


def read_csv_dir(folder: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """Parse and check an export folder: every value, and every step and node against its run and step."""
    runs = _read_table(folder / "runs.csv", "runs")
    steps = _read_table(folder / "steps.csv", "steps")
    nodes = _read_table(folder / "nodes.csv", "nodes")

    def unique(rows: list[dict], file: str, key) -> set:
        seen = set()
        for r in rows:
            k = key(r)
            if k in seen:
                raise CsvFormatError(f"{file} row {r['_line']}: {k} appears twice; nothing was imported")
            seen.add(k)
        return seen

    run_ids = unique(runs, "runs.csv", lambda r: r["id"])
    step_keys = unique(steps, "steps.csv", lambda r: (r["run_id"], r["step"]))
    unique(nodes, "nodes.csv", lambda r: (r["run_id"], r["step"], r["node"]))
    for r in steps:
        if r["run_id"] not in run_ids:
            raise CsvFormatError(
                f"steps.csv row {r['_line']}, column 'run_id': run {r['run_id']} is not in runs.csv; nothing was imported"
            )
    for r in nodes:
        if (r["run_id"], r["step"]) not in step_keys:
            raise CsvFormatError(
                f"nodes.csv row {r['_line']}, column 'step': run {r['run_id']} has no step {r['step']} "
                f"in steps.csv; nothing was imported"
            )
    for rows in (runs, steps, nodes):
        for r in rows:
            del r["_line"]
    return runs, steps, nodes
