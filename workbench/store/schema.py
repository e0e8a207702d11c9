"""The tables, as SQLAlchemy 2 typed ORM classes (Alembic's migrations in workbench/migrations/ build them).

Modelled on Phoenix's spans table: `runs` (one per generation), `steps` keyed by (run_id, step),
`nodes` keyed by (run_id, step, node) with the parent index, and `run_tags`. Trace fields that have
no column yet land in each table's `attributes` JSON, so nothing is lost when core/trace.py grows a
field before the schema does.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Double, ForeignKey, ForeignKeyConstraint, Integer, MetaData, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    # Named constraints, so Alembic's batch mode can find them again on SQLite.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted run's id is never handed out again

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created: Mapped[datetime] = mapped_column(DateTime, index=True)  # UTC
    finished: Mapped[datetime | None] = mapped_column(DateTime)
    status: Mapped[str] = mapped_column(Text, index=True)
    error: Mapped[str | None] = mapped_column(Text)
    method: Mapped[str] = mapped_column(Text, index=True)
    params: Mapped[dict] = mapped_column(JSON)
    model: Mapped[str] = mapped_column(Text, index=True)
    model_fingerprint: Mapped[str | None] = mapped_column(Text)
    draft_model: Mapped[str | None] = mapped_column(Text, index=True)
    draft_fingerprint: Mapped[str | None] = mapped_column(Text)
    device: Mapped[str] = mapped_column(Text)
    dtype: Mapped[str] = mapped_column(Text)
    prompt: Mapped[str] = mapped_column(Text)
    prompt_ids: Mapped[list] = mapped_column(JSON)
    context: Mapped[str | None] = mapped_column(Text)
    output_text: Mapped[str] = mapped_column(Text)
    output_ids: Mapped[list] = mapped_column(JSON)
    stop_reason: Mapped[str | None] = mapped_column(Text)
    prefill_seconds: Mapped[float] = mapped_column(Double)
    decode_seconds: Mapped[float] = mapped_column(Double)
    decode_cpu_seconds: Mapped[float | None] = mapped_column(Double)  # added by migration 0002: NULL in older runs
    external_accept_lengths: Mapped[list | None] = mapped_column(JSON(none_as_null=True))
    metrics: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))
    writer_pid: Mapped[int | None] = mapped_column(Integer)
    writer_host: Mapped[str | None] = mapped_column(Text)
    attributes: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))


class RunTag(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(Text, primary_key=True, index=True)


class Step(Base):
    __tablename__ = "steps"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    cache_pos: Mapped[int] = mapped_column(Integer)
    tree_size: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    emitted: Mapped[list] = mapped_column(JSON)
    draft_ms: Mapped[float] = mapped_column(Double)
    forward_ms: Mapped[float] = mapped_column(Double)
    verify_ms: Mapped[float] = mapped_column(Double)
    bookkeeping_ms: Mapped[float] = mapped_column(Double)
    attributes: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))


class Node(Base):
    __tablename__ = "nodes"
    __table_args__ = (ForeignKeyConstraint(["run_id", "step"], ["steps.run_id", "steps.step"], ondelete="CASCADE"),)

    # The primary key (run_id, step, node) is the index that loading one step reads.
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[int] = mapped_column(Integer, primary_key=True)
    cache_pos: Mapped[int] = mapped_column(Integer)
    parent: Mapped[int] = mapped_column(Integer)
    depth: Mapped[int] = mapped_column(Integer)
    token_id: Mapped[int] = mapped_column(Integer)
    token_text: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    p: Mapped[float | None] = mapped_column(Double)
    entropy: Mapped[float | None] = mapped_column(Double)
    max_p: Mapped[float | None] = mapped_column(Double)
    p_eos: Mapped[float | None] = mapped_column(Double)
    rank: Mapped[int | None] = mapped_column(Integer)
    logit_gap: Mapped[float | None] = mapped_column(Double)
    threshold: Mapped[float | None] = mapped_column(Double)
    draft_p: Mapped[float | None] = mapped_column(Double)
    correction_id: Mapped[int | None] = mapped_column(Integer)
    mem_count: Mapped[int | None] = mapped_column(Integer)
    attributes: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))
