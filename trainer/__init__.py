"""The learner: GRPO loss, batching, the learner loop and its process, the adapter bucket, the
supervised warm start.

It depends on :mod:`gymfleet.core` and the trajectory store only. Code outside this package
imports the names below from ``gymfleet.trainer`` (loaded on first use, so that importing the
bucket does not import torch).
"""

from __future__ import annotations

from gymfleet.core.lazy import lazy_exports

_EXPORTS = {
    "AdapterBucket": ".bucket", "Bucket": ".bucket", "PublishedAdapter": ".bucket", "BucketError": ".errors", "BucketCorruptError": ".errors",
    "RankLostError": ".errors", "GroupSource": ".signal", "Learner": ".learner", "LearnerConfig": ".learner",
    "StepMetrics": ".learner", "RolloutPolicy": ".rollout_policy", "StoreGroupSource": ".source", "PID_FILE": ".worker", "STEPS_FILE": ".step_log", "EXIT_REFUSED": ".worker",
    "WorkerArgs": ".worker", "learn": ".worker", "RankLauncher": ".data_parallel", "FollowerRank": ".data_parallel",
    "SpawnedRanks": ".worker", "follower_process": ".worker", "RankSpec": ".data_parallel", "learner_process": ".worker", "SFTConfig": ".sft",
    "SFTReport": ".sft", "warm_start": ".sft", "demonstration_loss": ".sft",
    "AdapterCard": ".model_card", "export_version": ".model_card",
    "GroupFilterStats": ".step_metrics", "DynamicSamplingConfig": ".signal",
    "StepRow": ".step_log", "StartRow": ".step_log", "EndRow": ".step_log", "ErrorRow": ".step_log",
    "FinalPublishRow": ".step_log", "LogRow": ".step_log", "read_log": ".step_log", "last_row": ".step_log",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
