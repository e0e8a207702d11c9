"""The schema revision of a database and the Alembic upgrade to this code's head (workbench/migrations/)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sqlalchemy import Connection, inspect

from workbench.store.errors import SchemaVersionError

MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


@lru_cache(maxsize=1)
def _scripts():
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS))


def known_revision(revision: str) -> bool:
    """True when `revision` is one of this code's migrations."""
    from alembic.util import CommandError

    try:
        return _scripts().get_revision(revision) is not None
    except (CommandError, KeyError, ValueError):
        return False


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def schema_state(conn: Connection, where: str) -> str:
    """ "current", "empty" (no tables yet) or "old" (an earlier revision, to upgrade); anything else
    (foreign tables, a newer revision) is a SchemaVersionError naming `where`."""
    from alembic.util import CommandError

    current = current_revision(conn)
    scripts = _scripts()
    if current == scripts.get_current_head():
        return "current"
    if current is None:
        tables = inspect(conn).get_table_names()
        if tables:
            raise SchemaVersionError(
                f"{where} holds tables ({', '.join(sorted(tables)[:5])}) but no spec-workbench schema version: "
                f"it is not a trace store; pass another --db (or WORKBENCH_DB)"
            )
        return "empty"
    try:
        scripts.get_revision(current)
    except CommandError:
        raise SchemaVersionError(
            f"{where} was written by a newer spec-workbench (schema revision {current}, this one knows up "
            f"to {scripts.get_current_head()}); upgrade spec-workbench or pass another --db"
        ) from None
    return "old"


def upgrade_to_head(conn: Connection) -> None:
    """Run the migrations on `conn` (inside the caller's transaction)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")
