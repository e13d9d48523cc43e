"""initial schema: runs, groups, samples, trajectories

Revision ID: 0001
Revises: 
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('runs',
    sa.Column('run_id', sa.String(length=200), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('status', sa.Enum('running', 'interrupted', 'completed', name='runstatus', native_enum=False, length=20), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('n_starts', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('run_id')
    )
    op.create_table('groups',
    sa.Column('group_id', sa.String(length=400), nullable=False),
    sa.Column('run_id', sa.String(length=200), nullable=False),
    sa.Column('task', sa.String(length=200), nullable=False),
    sa.Column('env_id', sa.String(length=200), nullable=False),
    sa.Column('instance_id', sa.String(length=400), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('n_done', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('claimed_by', sa.String(length=200), nullable=True),
    sa.Column('claim_token', sa.String(length=64), nullable=True),
    sa.Column('claim_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('consumed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('group_id')
    )
    with op.batch_alter_table('groups', schema=None) as batch_op:
        batch_op.create_index('ix_groups_claimable', ['completed_at', 'consumed_at', 'claim_expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_groups_run_id'), ['run_id'], unique=False)

    op.create_table('trajectories',
    sa.Column('rollout_id', sa.String(length=460), nullable=False),
    sa.Column('run_id', sa.String(length=200), nullable=False),
    sa.Column('group_id', sa.String(length=400), nullable=False),
    sa.Column('sample_id', sa.String(length=420), nullable=True),
    sa.Column('env_id', sa.String(length=200), nullable=False),
    sa.Column('instance_id', sa.String(length=400), nullable=False),
    sa.Column('task', sa.String(length=200), nullable=False),
    sa.Column('token_ids', sa.LargeBinary(), nullable=False),
    sa.Column('loss_mask', sa.LargeBinary(), nullable=False),
    sa.Column('logprobs', sa.LargeBinary(), nullable=False),
    sa.Column('versions', sa.LargeBinary(), nullable=False),
    sa.Column('n_tokens', sa.Integer(), nullable=False),
    sa.Column('n_generated_tokens', sa.Integer(), nullable=False),
    sa.Column('policy_version_min', sa.Integer(), nullable=False),
    sa.Column('policy_version_max', sa.Integer(), nullable=False),
    sa.Column('messages', sa.JSON(), nullable=False),
    sa.Column('reward', sa.Float(), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('status', sa.Enum('ok', 'truncated', 'policy_error', 'env_error', 'infra_error', 'aborted', name='rolloutstatus', native_enum=False, length=20), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('timings', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('rollout_id')
    )
    with op.batch_alter_table('trajectories', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trajectories_group_id'), ['group_id'], unique=False)
        batch_op.create_index('ix_trajectories_run_created', ['run_id', 'created_at'], unique=False)

    op.create_table('samples',
    sa.Column('sample_id', sa.String(length=420), nullable=False),
    sa.Column('run_id', sa.String(length=200), nullable=False),
    sa.Column('group_id', sa.String(length=400), nullable=False),
    sa.Column('sample_idx', sa.Integer(), nullable=False),
    sa.Column('state', sa.Enum('pending', 'running', 'done', 'quarantined', name='samplestate', native_enum=False, length=20), nullable=False),
    sa.Column('n_attempts', sa.Integer(), nullable=False),
    sa.Column('rollout_id', sa.String(length=460), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['group_id'], ['groups.group_id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('sample_id')
    )
    with op.batch_alter_table('samples', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_samples_group_id'), ['group_id'], unique=False)
        batch_op.create_index('ix_samples_run_state', ['run_id', 'state'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('samples', schema=None) as batch_op:
        batch_op.drop_index('ix_samples_run_state')
        batch_op.drop_index(batch_op.f('ix_samples_group_id'))

    op.drop_table('samples')
    with op.batch_alter_table('trajectories', schema=None) as batch_op:
        batch_op.drop_index('ix_trajectories_run_created')
        batch_op.drop_index(batch_op.f('ix_trajectories_group_id'))

    op.drop_table('trajectories')
    with op.batch_alter_table('groups', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_groups_run_id'))
        batch_op.drop_index('ix_groups_claimable')

    op.drop_table('groups')
    op.drop_table('runs')
