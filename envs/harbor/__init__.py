"""Harbor-v0: community task folders (Harbor / Terminal-Bench 2.x and Terminal-Bench 1), built and graded offline."""

from gymfleet.envs.harbor.env import HarborEnv, HarborEnvConfig

__all__ = ["HarborEnv", "HarborEnvConfig"]
