"""The CSV export format: runs.csv, steps.csv and nodes.csv, one column per table column.

Values are written so they read back to the same value (floats by repr, JSON sorted and compact,
datetimes to the microsecond); an empty field is null. Reading checks every value, and every step and
node against its run and step, before the store writes anything.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, DateTime, Double, Integer, select
from sqlalchemy.orm import Session

from core.trace import DECISIONS, SOURCES, STATUSES
from workbench.store.errors import CsvFormatError
from workbench.store.rows import chunks
from workbench.store.schema import Node, Run, Step

CSV_TABLES = {"runs": Run.__table__, "steps": Step.__table__, "nodes": Node.__table__}
# Values a column must take, checked on import.
CSV_CHOICES = {("runs", "status"): STATUSES, ("nodes", "source"): SOURCES, ("nodes", "decision"): DECISIONS}
CSV_JSON_KINDS = {("runs", "params"): dict, ("runs", "tags"): list, ("runs", "prompt_ids"): list,
                  ("runs", "output_ids"): list, ("steps", "emitted"): list}


def csv_columns(name: str) -> list[str]:
    """The header of `name`.csv: the table's columns, `id` written as `run_id`, and `tags` for runs."""
    cols = [c.name for c in CSV_TABLES[name].columns]
    if name == "runs":
        cols = ["run_id" if c == "id" else c for c in cols] + ["tags"]
    return cols


def table_type(name: str, column: str) -> str:
    if name == "runs" and column in ("run_id", "tags"):
        return "int" if column == "run_id" else "json"
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


def _format(kind: str, value: Any) -> str:
    if value is None:
        return ""
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
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "json":
        return json.loads(raw)
    if kind == "datetime":
        return datetime.fromisoformat(raw)
    return raw


# ---------------------------------------------------------------- writing

def write_csv(session: Session, run_ids: Sequence[int], tags: Mapping[int, list[str]], out: Path) -> dict[str, Path]:
    """Write runs.csv, steps.csv and nodes.csv for these (existing) runs into `out`."""
    paths = {}
    for name, table in CSV_TABLES.items():
        cols = csv_columns(name)
        path = paths[name] = out / f"{name}.csv"
        with path.open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(cols)
            key = table.c.id if name == "runs" else table.c.run_id
            order = list(table.primary_key.columns)
            for chunk in chunks(run_ids, 500):
                for row in session.execute(select(table).where(key.in_(chunk)).order_by(*order)):
                    m = dict(row._mapping)
                    if name == "runs":
                        m["run_id"] = m.pop("id")
                        m["tags"] = tags.get(m["run_id"], [])
                    w.writerow([_format(table_type(name, c), m[c]) for c in cols])
    return paths


# ---------------------------------------------------------------- reading

def _read_table(path: Path, name: str) -> list[dict[str, Any]]:
    if not path.exists():
        raise CsvFormatError(f"{path} is missing: an export folder holds runs.csv, steps.csv and nodes.csv")
    cols = csv_columns(name)
    table = CSV_TABLES[name]
    rows = []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != cols:
            missing = [c for c in cols if c not in (header or [])]
            extra = [c for c in (header or []) if c not in cols]
            raise CsvFormatError(f"{path.name}: the header does not match this schema"
                                 + (f"; missing columns {missing}" if missing else "")
                                 + (f"; unknown columns {extra}" if extra else "")
                                 + ("; columns out of order" if not missing and not extra else ""))
        # Rows are counted as a spreadsheet shows them (the header is row 1); a quoted field may span lines.
        for line, values in enumerate(reader, start=2):
            if len(values) != len(cols):
                raise CsvFormatError(f"{path.name} row {line}: {len(values)} fields, expected {len(cols)}")
            row = {}
            for col, raw in zip(cols, values):
                db_col = "id" if (name == "runs" and col == "run_id") else col
                nullable = col != "tags" and table.c[db_col].nullable and not table.c[db_col].primary_key
                try:
                    value = _parse(table_type(name, col), raw, nullable)
                    choices = CSV_CHOICES.get((name, col))
                    if choices and value not in choices:
                        raise ValueError(f"must be one of {', '.join(choices)}")
                    kind = CSV_JSON_KINDS.get((name, col))
                    if kind and not isinstance(value, kind):
                        raise ValueError(f"must be a JSON {kind.__name__}")
                except ValueError as e:
                    raise CsvFormatError(f"{path.name} row {line}, column {col!r}: {e} (got {raw[:80]!r}); nothing was imported") from None
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
            raise CsvFormatError(f"steps.csv row {r['_line']}, column 'run_id': run {r['run_id']} is not in runs.csv; nothing was imported")
    for r in nodes:
        if (r["run_id"], r["step"]) not in step_keys:
            raise CsvFormatError(f"nodes.csv row {r['_line']}, column 'step': run {r['run_id']} has no step {r['step']} "
                                 f"in steps.csv; nothing was imported")
    for rows in (runs, steps, nodes):
        for r in rows:
            del r["_line"]
    return runs, steps, nodes
