"""The trace store: every run, its steps and one row per tree node per step, in SQLite by default
(any SQLAlchemy URL works; PostgreSQL is tested), with CSV export and import.

    schema.py          the tables (SQLAlchemy 2 typed ORM; Alembic migrations in workbench/migrations/)
    rows.py            trace records <-> rows (pure)
    connection.py      URL resolution, lock wait, one engine per database
    schema_version.py  the database's revision and the upgrade to head
    repository.py      Store: open, write, query, load, delete, CSV in and out
    recording.py       a run written step by step while it decodes
    csv_io.py          the CSV format (write, parse, check)
    openinference.py   spans in OpenInference's conventions (JSON Lines, OTLP)
    compare.py         where two runs' outputs part
    errors.py          what can go wrong, said plainly

Import from here: `from workbench.store import Store`.
"""

from workbench.store.compare import compare_traces
from workbench.store.connection import resolve_url
from workbench.store.errors import (
    CorruptStoreError,
    CsvFormatError,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
    StoreLockedError,
    StoreUnavailableError,
)
from workbench.store.recording import Recording
from workbench.store.repository import RunSummary, Store, StoredRun
from workbench.store.schema import Base, Node, Run, RunTag, Step

__all__ = [
    "Base",
    "CorruptStoreError",
    "CsvFormatError",
    "Node",
    "Recording",
    "Run",
    "RunNotFoundError",
    "RunSummary",
    "RunTag",
    "SchemaVersionError",
    "Step",
    "Store",
    "StoreError",
    "StoreLockedError",
    "StoreUnavailableError",
    "StoredRun",
    "compare_traces",
    "resolve_url",
]
