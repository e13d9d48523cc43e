"""The terminal env family: bash tasks in a sandbox, graded by hidden tests."""

from gymfleet.envs.terminal.env import TerminalEnv, TerminalEnvConfig

__all__ = ["TerminalEnv", "TerminalEnvConfig"]
