"""Trace records (core/trace.py) to table rows and back: pure, no session.

Fields without a column go to the table's `attributes` JSON on the way in and come back from it on
the way out, so a trace field added before the schema grows a column survives a round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any

from core.stats import run_metrics
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.store.schema import Node, Run, Step


def _names(cls) -> list[str]:
    return [f.name for f in fields(cls)]


RUN_FIELDS = [n for n in _names(RunTrace) if n != "steps"]
STEP_FIELDS = [n for n in _names(StepTrace) if n != "nodes"]
NODE_FIELDS = _names(NodeTrace)
RUN_EXTRA = [n for n in RUN_FIELDS if n not in Run.__table__.columns]
STEP_EXTRA = [n for n in STEP_FIELDS if n != "index" and n not in Step.__table__.columns]
NODE_EXTRA = [n for n in NODE_FIELDS if n not in Node.__table__.columns]


def utcnow() -> datetime:
    """Now in UTC, without tzinfo (the DateTime columns hold naive UTC)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def run_row(run: RunTrace) -> dict[str, Any]:
    """The `runs` columns of a trace (not id, created, writer); fields without a column go to `attributes`."""
    row = {name: getattr(run, name) for name in RUN_FIELDS}
    row["attributes"] = {k: row.pop(k) for k in RUN_EXTRA} or None
    for name in ("context", "error", "draft_model", "stop_reason"):  # CSV cannot tell "" from null: keep null only
        row[name] = row[name] or None
    row["params"] = dict(row["params"])
    row["metrics"] = run_metrics(run) if run.steps or run.output_ids else None
    return row


def _values(obj: Any, names: list[str]) -> dict[str, Any]:
    d = getattr(obj, "__dict__", None)  # a plain dataclass: copying its dict is the fast path
    return dict(d) if d is not None else {name: getattr(obj, name) for name in names}


def step_rows(run_id: int, steps: Iterable[StepTrace]) -> tuple[list[dict], list[dict]]:
    """Rows for `steps` and `nodes`: lists of dicts for one bulk insert each."""
    srows, nrows = [], []
    for s in steps:
        row = _values(s, STEP_FIELDS)
        del row["nodes"]
        row["step"] = row.pop("index")
        row["attributes"] = {k: row.pop(k) for k in STEP_EXTRA} or None
        row["run_id"] = run_id
        srows.append(row)
        for n in s.nodes:
            nrow = _values(n, NODE_FIELDS)
            nrow["attributes"] = {k: nrow.pop(k) for k in NODE_EXTRA} or None
            nrow["run_id"] = run_id
            nrows.append(nrow)
    return srows, nrows


def _known(cls_fields: list[str], attributes: dict | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if k in cls_fields}


def node_from_row(row: Any) -> NodeTrace:
    m = row._mapping
    return NodeTrace(**{k: m[k] for k in NODE_FIELDS if k in m}, **_known(NODE_FIELDS, m["attributes"]))


def step_from_row(row: Any, nodes: list[NodeTrace]) -> StepTrace:
    m = row._mapping
    values = {k: m[k] for k in STEP_FIELDS if k in m}
    return StepTrace(index=m["step"], nodes=nodes, **values, **_known(STEP_FIELDS, m["attributes"]))


def run_from_row(run: Run, steps: list[StepTrace]) -> RunTrace:
    values = {k: getattr(run, k) for k in RUN_FIELDS if k in Run.__table__.columns}
    return RunTrace(steps=steps, **values, **_known(RUN_FIELDS, run.attributes))


def chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    """Consecutive slices of at most `size` items (bounded IN lists and executemany batches)."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
