"""sample and run leases: several orchestrators on one run

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ('samples', 'runs'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('lease_owner', sa.String(length=200), nullable=True))
            batch_op.add_column(sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for table in ('runs', 'samples'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('lease_expires_at')
            batch_op.drop_column('lease_owner')
