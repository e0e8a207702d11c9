"""Alembic migrations of the trace store; workbench.store runs them on open (`upgrade head`)."""
