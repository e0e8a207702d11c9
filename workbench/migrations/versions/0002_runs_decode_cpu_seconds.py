"""runs.decode_cpu_seconds: the decoding thread's CPU time, what speed-ups are ratios of when both runs have it

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26 16:10:00.000000

Runs stored before it keep NULL there (not measured): their speed-ups fall back to the wall clock, and say so.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("decode_cpu_seconds", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("decode_cpu_seconds")
