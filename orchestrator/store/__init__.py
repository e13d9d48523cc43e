"""The SQL trajectory store: schema, migrations, batched writes, learner claims, queries, export."""

from gymfleet.orchestrator.store.claims import Claim, ClaimedGroup
from gymfleet.orchestrator.store.store import TrajectoryStore
from gymfleet.orchestrator.store.leases import new_owner
from gymfleet.orchestrator.store.workqueue import GroupSpec, ResumeState, SampleClaim, SampleRef

__all__ = ["Claim", "ClaimedGroup", "GroupSpec", "ResumeState", "SampleClaim", "SampleRef", "TrajectoryStore", "new_owner"]
