"""The command-line coding agents Harness-v0 runs inside a task's sandbox, by name: what to
install (an npm package's native binary, version pinned), which gateway dialect it speaks, its
settings files and its command line.

An agent runs where it stands: its tools are the sandbox's own shell, so no bridge is involved.
It reaches the model only through ``http://127.0.0.1:<port>`` inside the sandbox, a socket the
session's proxy (``envs/harness/session_proxy.py``) listens on. The image holds only the binary
(``envs/harness/agent_image.py``); the settings files are written into the sandbox per rollout.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import Field

from gymfleet.core.strict import StrictModel

AGENT_ROOT = "/opt/gymfleet-agent"
"""Where an agent image holds the binary (``bin/<name>``)."""
AGENT_STATE = "/tmp/.gymfleet-agent"
"""Where an agent keeps its state during a rollout (its home, the instruction, its transcript)."""
PROXY_PORT = 47113
"""The sandbox-local TCP port the session proxy listens on."""
BUILTIN = "builtin"
""":attr:`CliAgentConfig.instructions` that keeps the agent's own system prompt."""


class CliAgentConfig(StrictModel):
    """What a user sets for a command-line agent (``env_kwargs.agent`` of Harness-v0)."""

    model: str = "gymfleet"
    """The model name the agent sends (the gateway serves the run's policy whatever the name)."""
    max_turns: int = Field(default=30, ge=1)
    """Model calls one episode may make; the proxy refuses the next one (the agent then stops)."""
    permission_mode: str | None = None
    """The agent's own permission mode (tools allowed without asking); None: the agent's entry's
    default, which allows every tool (the sandbox is the boundary)."""
    extra_args: list[str] = Field(default_factory=list)
    """More command-line flags, appended as given."""
    version: str | None = None
    """The npm version to install; None: the version validated here (:data:`CLI_AGENTS`)."""
    instructions: str | None = None
    """Replaces the agent's system instructions (Codex: ``model_instructions_file``; opencode: its
    build agent's prompt; Claude Code: ``--system-prompt``). None: the agent entry's default: Codex
    and opencode keep their own (Codex's are about 4,500 tokens), Claude Code gets gymfleet's short
    :data:`CLAUDE_INSTRUCTIONS` (its own prompt and tool list fill ~50 kB, more than SmolLM2-135M's
    8,192-token context). :data:`BUILTIN` keeps the agent's own in every case."""
    tools: list[str] | None = None
    """Claude Code's built-in tools offered to the model (``--tools``); None: ``["Bash"]`` (the one
    tool gold needs, and a short request); ``["default"]``: all of them. Other agents refuse it."""
    max_transcript_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """The agent's stdout (its JSON transcript) past this many bytes is a flood: it is cut and the
    rollout ends ``truncated``."""


@dataclass(frozen=True)
class CliAgent:
    """One command-line agent.

    Attributes:
        name: the harness name (``env_kwargs.harness``).
        package: the npm package of the native binary, ``{version}`` and ``{platform}`` filled in.
        version: the version validated here.
        platforms: Docker's architecture name to the npm platform suffix.
        binary: the binary's path inside the package tarball, ``{triple}`` filled per platform.
        triples: npm platform suffix to the target triple in ``binary``.
        dialect: the gateway dialect it speaks (``openai-chat``, ``openai-responses``,
            ``anthropic-messages``).
        default_permission_mode: :attr:`CliAgentConfig.permission_mode` when unset.
        settings: ``(config) -> {relative path: text}``, files placed in its home.
        command: ``(config, binary, home) -> shell words`` before the instruction.
        home_env: the variable naming its home folder.
        env: fixed environment variables (no telemetry, no update check).
        takes_tools: whether :attr:`CliAgentConfig.tools` applies.
    """

    name: str
    package: str
    version: str
    platforms: dict[str, str]
    binary: str
    triples: dict[str, str]
    dialect: str
    default_permission_mode: str
    settings: Callable[[CliAgentConfig], dict[str, str]]
    command: Callable[[CliAgentConfig, str], list[str]]
    home_env: str
    env: dict[str, str] = field(default_factory=dict)
    takes_tools: bool = False

    def npm_spec(self, arch: str, version: str | None = None) -> str:
        """``name@version`` of the platform package for Docker architecture ``arch``.

        Raises:
            KeyError: no platform package for ``arch`` (the message lists the supported ones).
        """
        if arch not in self.platforms:
            raise KeyError(f"{self.name} ships no binary for {arch!r}: it has {sorted(self.platforms)}")
        return self.package.format(version=version or self.version, platform=self.platforms[arch])

    def binary_member(self, arch: str) -> str:
        """The binary's path in the platform package's tarball."""
        return self.binary.format(triple=self.triples[self.platforms[arch]])

    def launch(self, config: CliAgentConfig) -> str:
        """The bash line that runs the agent on ``$AGENT_STATE/instruction.md`` (its settings already
        in ``$AGENT_STATE/home``), its stdout (the transcript) cut at ``max_transcript_bytes``; it
        exits with the agent's own status."""
        home = f"{AGENT_STATE}/home"
        words = [*self.command(config, f"{AGENT_ROOT}/bin/{self.name}"), *config.extra_args]
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**self.env, self.home_env: home}.items())
        return (f"env {env} {shlex.join(words)} \"$(cat {AGENT_STATE}/instruction.md)\" </dev/null "
                f"| head -c {config.max_transcript_bytes} > {AGENT_STATE}/transcript.jsonl; "
                "exit ${PIPESTATUS[0]}")


def _codex_settings(config: CliAgentConfig) -> dict[str, str]:
    # Codex's documented config.toml (developers.openai.com/codex/config-reference): a custom
    # provider on the Responses API, no approvals, no update check or analytics, and only the
    # function tools a gateway can serve (no hosted web search, sub-agents or goals).
    toml = f"""model = {json.dumps(config.model)}
model_provider = "gymfleet"
approval_policy = "never"
sandbox_mode = {json.dumps(config.permission_mode or "danger-full-access")}
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.gymfleet]
name = "gymfleet"
base_url = "http://127.0.0.1:{PROXY_PORT}/v1"
env_key = "GYMFLEET_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
multi_agent = false
goals = false
"""
    if config.instructions in (None, BUILTIN):
        return {"config.toml": toml}
    top = f'model_instructions_file = "{AGENT_STATE}/home/instructions.md"\n'
    return {"config.toml": top + toml, "instructions.md": config.instructions}


def _codex_command(config: CliAgentConfig, binary: str) -> list[str]:
    return [binary, "exec", "--json", "--skip-git-repo-check", "--color", "never"]


CODEX = CliAgent(
    name="codex", package="@openai/codex@{version}-{platform}", version="0.171.0",
    platforms={"x86_64": "linux-x64", "aarch64": "linux-arm64"},
    binary="package/vendor/{triple}/bin/codex",
    triples={"linux-x64": "x86_64-unknown-linux-musl", "linux-arm64": "aarch64-unknown-linux-musl"},
    dialect="openai-responses", default_permission_mode="danger-full-access",
    settings=_codex_settings, command=_codex_command, home_env="CODEX_HOME",
    env={"GYMFLEET_API_KEY": "gymfleet", "RUST_LOG": "error", "NO_COLOR": "1"},
)
"""OpenAI's Codex CLI: a static (musl) binary in ``@openai/codex``'s platform packages, run as
``codex exec --json`` (non-interactive, one JSON event per line)."""

def _opencode_settings(config: CliAgentConfig) -> dict[str, str]:
    # opencode's documented opencode.json (opencode.ai/docs/config): a custom provider through the
    # bundled @ai-sdk/openai-compatible (Chat Completions), no autoupdate or sharing, every tool
    # allowed, on paths outside the working folder too (its external_directory check otherwise
    # rejects a Harbor gold's /solution in a run without a user to ask), except web fetches (the
    # sandbox has no network), and no title agent (its extra call
    # per session would be sampled and trained on as if it were the episode).
    allow = config.permission_mode or "allow"
    settings: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled", "snapshot": False,
        "model": f"gymfleet/{config.model}", "small_model": f"gymfleet/{config.model}",
        "provider": {"gymfleet": {"npm": "@ai-sdk/openai-compatible", "name": "gymfleet",
                                  "options": {"baseURL": f"http://127.0.0.1:{PROXY_PORT}/v1", "apiKey": "gymfleet"},
                                  "models": {config.model: {"name": config.model}}}},
        "permission": {"edit": allow, "bash": allow, "external_directory": allow, "webfetch": "deny"},
        "agent": {"title": {"disable": True}},
    }
    if config.instructions not in (None, BUILTIN):
        settings["agent"] = {"title": {"disable": True}, "build": {"prompt": config.instructions}}
    return {"opencode/opencode.json": json.dumps(settings, indent=2)}


def _opencode_command(config: CliAgentConfig, binary: str) -> list[str]:
    return [binary, "run", "--format", "json"]


OPENCODE = CliAgent(
    name="opencode", package="{platform}@{version}", version="1.18.33",
    platforms={"x86_64": "opencode-linux-x64", "aarch64": "opencode-linux-arm64"},
    binary="package/bin/opencode", triples={"opencode-linux-x64": "", "opencode-linux-arm64": ""},
    dialect="openai-chat", default_permission_mode="allow",
    settings=_opencode_settings, command=_opencode_command, home_env="XDG_CONFIG_HOME",
    env={"HOME": f"{AGENT_STATE}/home", "XDG_DATA_HOME": f"{AGENT_STATE}/data",
         "XDG_CACHE_HOME": f"{AGENT_STATE}/cache", "XDG_STATE_HOME": f"{AGENT_STATE}/state",
         "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
         "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "NO_COLOR": "1",
         # no default plugins (fetched from npm at start: with no network, ~20 s of start-up lost);
         # no settings, CLAUDE.md or skills from the task's folder (the policy writes it); no file watcher
         "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
         "OPENCODE_DISABLE_CLAUDE_CODE": "1", "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
         "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1", "OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1"},
)
"""opencode: a Bun-compiled binary (glibc) in ``opencode-ai``'s platform packages, run as
``opencode run --format json`` (non-interactive, one JSON event per line)."""

CLAUDE_INSTRUCTIONS = ("You are a coding agent working in a Linux shell. Solve the task with the Bash tool, "
                       "one command per call. When the task is done, reply without a tool call.")
"""Claude Code's system prompt unless :attr:`CliAgentConfig.instructions` says otherwise."""
CLAUDE_PERMISSION_MODE = "bypassPermissions"
"""Claude Code's permission mode unless :attr:`CliAgentConfig.permission_mode` says otherwise."""


def _claude_settings(config: CliAgentConfig) -> dict[str, str]:
    # Claude Code's documented settings.json (code.claude.com/docs/en/settings), the only settings
    # source it reads here (--setting-sources ""): none from the task's folder, which the policy
    # writes. No co-author lines, no cleanup of transcripts, no auto-updates.
    settings = {"permissions": {"defaultMode": config.permission_mode or CLAUDE_PERMISSION_MODE},
                "includeCoAuthoredBy": False, "autoUpdates": False, "cleanupPeriodDays": 1}
    return {"settings.json": json.dumps(settings, indent=2)}


def _claude_command(config: CliAgentConfig, binary: str) -> list[str]:
    words = [binary, "--print", "--output-format", "stream-json", "--verbose", "--model", config.model,
             "--max-turns", str(config.max_turns), "--permission-mode", config.permission_mode or CLAUDE_PERMISSION_MODE,
             "--settings", f"{AGENT_STATE}/home/settings.json", "--setting-sources", "", "--strict-mcp-config",
             "--no-session-persistence", "--tools", ",".join(config.tools or ["Bash"])]
    if config.instructions != BUILTIN:
        words += ["--system-prompt", config.instructions or CLAUDE_INSTRUCTIONS]
    return words


CLAUDE_CODE = CliAgent(
    name="claude", package="@anthropic-ai/claude-code-{platform}@{version}", version="2.1.332",
    platforms={"x86_64": "linux-x64", "aarch64": "linux-arm64"},
    binary="package/claude", triples={"linux-x64": "", "linux-arm64": ""},
    dialect="anthropic-messages", default_permission_mode=CLAUDE_PERMISSION_MODE,
    settings=_claude_settings, command=_claude_command, home_env="CLAUDE_CONFIG_DIR",
    env={"HOME": f"{AGENT_STATE}/home", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{PROXY_PORT}",
         "ANTHROPIC_API_KEY": "gymfleet", "IS_SANDBOX": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
         "NO_COLOR": "1"},
    takes_tools=True,
)
"""Anthropic's Claude Code: a Bun-compiled binary (glibc) in ``@anthropic-ai/claude-code``'s platform
packages (no Node needed), run as ``claude --print --output-format stream-json`` (non-interactive,
one JSON event per line). ``IS_SANDBOX=1`` lets it bypass permissions as root (it refuses
otherwise): the sandbox, not the agent, is the boundary."""

CLI_AGENTS: dict[str, CliAgent] = {CODEX.name: CODEX, OPENCODE.name: OPENCODE, CLAUDE_CODE.name: CLAUDE_CODE}
"""The command-line agents by harness name."""
