"""Alembic environment: the store passes its open connection in `config.attributes["connection"]`.

To add a migration after changing the models in workbench/store/schema.py (from the project root):
    python -c "from alembic.config import Config; from alembic import command; c = Config(); \
c.set_main_option('script_location', 'workbench/migrations'); \
c.set_main_option('sqlalchemy.url', 'sqlite:///schema.db'); command.upgrade(c, 'head'); \
command.revision(c, 'what changed', autogenerate=True)"
then read the new file under versions/ (batch mode is on, so SQLite can alter tables).
"""

from alembic import context
from sqlalchemy import create_engine

from workbench.store.schema import Base

config = context.config
connection = config.attributes.get("connection")


def run(conn) -> None:
    context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    run(connection)
else:  # the developer command above
    with create_engine(config.get_main_option("sqlalchemy.url")).begin() as conn:
        run(conn)
