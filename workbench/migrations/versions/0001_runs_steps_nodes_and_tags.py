"""runs, steps, nodes and tags: the first schema of the trace store

Revision ID: 0001
Revises:
Create Date: 2026-11-23 09:22:01.080070
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("finished", sa.DateTime(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("model_fingerprint", sa.Text(), nullable=True),
        sa.Column("draft_model", sa.Text(), nullable=True),
        sa.Column("draft_fingerprint", sa.Text(), nullable=True),
        sa.Column("device", sa.Text(), nullable=False),
        sa.Column("dtype", sa.Text(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("prompt_ids", sa.JSON(), nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("output_text", sa.Text(), nullable=False),
        sa.Column("output_ids", sa.JSON(), nullable=False),
        sa.Column("stop_reason", sa.Text(), nullable=True),
        sa.Column("prefill_seconds", sa.Double(), nullable=False),
        sa.Column("decode_seconds", sa.Double(), nullable=False),
        sa.Column("external_accept_lengths", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("metrics", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("writer_pid", sa.Integer(), nullable=True),
        sa.Column("writer_host", sa.Text(), nullable=True),
        sa.Column("attributes", sa.JSON(none_as_null=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_created"), ["created"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_draft_model"), ["draft_model"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_method"), ["method"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_model"), ["model"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_tags_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "tag", name=op.f("pk_run_tags")),
    )
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_tags_tag"), ["tag"], unique=False)

    op.create_table(
        "steps",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("cache_pos", sa.Integer(), nullable=False),
        sa.Column("tree_size", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("emitted", sa.JSON(), nullable=False),
        sa.Column("draft_ms", sa.Double(), nullable=False),
        sa.Column("forward_ms", sa.Double(), nullable=False),
        sa.Column("verify_ms", sa.Double(), nullable=False),
        sa.Column("bookkeeping_ms", sa.Double(), nullable=False),
        sa.Column("attributes", sa.JSON(none_as_null=True), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_steps_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "step", name=op.f("pk_steps")),
    )
    op.create_table(
        "nodes",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("cache_pos", sa.Integer(), nullable=False),
        sa.Column("parent", sa.Integer(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("token_text", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("p", sa.Double(), nullable=True),
        sa.Column("entropy", sa.Double(), nullable=True),
        sa.Column("max_p", sa.Double(), nullable=True),
        sa.Column("p_eos", sa.Double(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("logit_gap", sa.Double(), nullable=True),
        sa.Column("threshold", sa.Double(), nullable=True),
        sa.Column("draft_p", sa.Double(), nullable=True),
        sa.Column("correction_id", sa.Integer(), nullable=True),
        sa.Column("mem_count", sa.Integer(), nullable=True),
        sa.Column("attributes", sa.JSON(none_as_null=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id", "step"],
            ["steps.run_id", "steps.step"],
            name=op.f("fk_nodes_run_id_step_steps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "step", "node", name=op.f("pk_nodes")),
    )


def downgrade() -> None:
    for table in ("nodes", "steps", "run_tags", "runs"):
        op.drop_table(table)
