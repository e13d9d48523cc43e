"""viewer indexes: run-wide tallies from one covering index, groups paged by creation time

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index('ix_trajectories_view', 'trajectories',
                    ['run_id', 'task', 'status', 'policy_version_min', 'policy_version_max', 'reward'], unique=False)
    op.create_index('ix_groups_run_created', 'groups', ['run_id', 'created_at', 'group_id', 'completed_at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_groups_run_created', table_name='groups')
    op.drop_index('ix_trajectories_view', table_name='trajectories')
