"""mini-swe-agent 2.x, unmodified, on a gymfleet sandbox: its environment interface over the
:class:`SandboxBridge`, its model pointed at the session's gateway URL through litellm.

Its own configs are used as shipped (``mini.yaml``: the ``bash`` tool called through tool calls;
``mini_textbased.yaml``: one ``mswea_bash_command`` block per reply), with ``step_limit`` set to
:data:`STEP_LIMIT` and cost tracking off (the model is gymfleet's, unpriced). A run may merge
config specs of its own over them, as ``mini -c mini.yaml -c mine.yaml`` does
(:func:`config_overrides`; ``harness_config`` of ``gymfleet/Harness-v0``).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from gymfleet.envs.harness.bridge import SandboxBridge

SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""How mini-swe-agent's agent says it is done (its configs' instruction)."""

STEP_LIMIT = 12
"""Model calls a mini-swe-agent episode may make (its ``step_limit``; its configs ship 0 = none)."""


def config_overrides(specs: list[str]) -> dict[str, Any]:
    """Reads mini-swe-agent config specs, as its ``mini -c`` takes them, merged in order.

    Args:
        specs: each a builtin config's name, a YAML file's path (relative to the working
            directory), or ``key.path=value`` (the value read as JSON where it parses).

    Returns:
        One nested mapping (``agent``, ``model``, ``environment``...), later specs winning
        (mini-swe-agent's own ``recursive_merge``).

    Raises:
        ValueError: a spec names no file, or a file is not a YAML mapping (one line naming it).
    """
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on import
    from minisweagent.config import get_config_from_spec
    from minisweagent.utils.serialize import recursive_merge

    loaded = []
    for spec in specs:
        try:
            config = get_config_from_spec(spec)
        except FileNotFoundError:
            raise ValueError(f"harness_config {spec!r}: no such mini-swe-agent config file (a path, relative to "
                             f"the working directory, or a builtin name such as mini.yaml)") from None
        except (yaml.YAMLError, ValueError) as exc:
            raise ValueError(f"harness_config {spec!r}: {' '.join(str(exc).split())[:200]}") from None
        if not isinstance(config, dict):
            raise ValueError(f"harness_config {spec!r}: a mini-swe-agent config is a YAML mapping "
                             f"(agent:, model:, environment:), not {type(config).__name__}")
        loaded.append(config)
    return recursive_merge(*loaded)


def _environment_class() -> type:
    from minisweagent.environments.local import LocalEnvironment

    class GymfleetEnvironment(LocalEnvironment):
        """mini-swe-agent's environment interface, its commands run in the task's sandbox."""

        def __init__(self, bridge: SandboxBridge, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.bridge = bridge

        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            command = str(action.get("command", ""))
            if command.strip() == SUBMIT_COMMAND:  # its way of finishing: graded by the task, not run
                self.bridge.submit()
                self._check_finished({"output": SUBMIT_COMMAND.split()[1] + "\n", "returncode": 0})
            result = self.bridge.execute(command)
            return {"output": result.output, "returncode": result.exit_code, "exception_info": ""}

    return GymfleetEnvironment


def run_mini_swe_agent(task: str, base_url: str, bridge: SandboxBridge, config_name: str,
                       overrides: dict[str, Any] | None = None) -> str:
    """Runs mini-swe-agent's ``DefaultAgent`` on ``task`` (in the calling worker thread).

    Args:
        task: the task's instruction.
        base_url: the session's OpenAI-compatible base URL (``.../s/<token>/v1``).
        bridge: where its commands run.
        config_name: ``mini.yaml`` (tool calls) or ``mini_textbased.yaml`` (text actions).
        overrides: merged over that config (:func:`config_overrides`); None: it as shipped.

    Returns:
        Its exit status (``Submitted``, ``LimitsExceeded``, ``RepeatedFormatError``, ...).

    Raises:
        Exception: whatever the harness raised (a crash; the rollout classifies it).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost-map download at import
    os.environ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = "1"  # a failed call is lost, never retried minutes later
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    import litellm
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import builtin_config_dir
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel
    from minisweagent.utils.serialize import recursive_merge

    litellm.suppress_debug_info = True  # its cost lookup of the unpriced model printed a provider list each call
    config = recursive_merge(yaml.safe_load((builtin_config_dir / config_name).read_text()), overrides or {})
    model_class = LitellmTextbasedModel if "textbased" in config_name else LitellmModel
    model_config = {**config.get("model", {}), "model_name": "openai/gymfleet", "cost_tracking": "ignore_errors"}
    model_config["model_kwargs"] = {**model_config.get("model_kwargs", {}), "api_base": base_url,
                                    "api_key": "gymfleet", "num_retries": 0}
    model = model_class(**model_config)
    env = _environment_class()(bridge, **config.get("environment", {}))
    agent = DefaultAgent(model, env, **{**config["agent"], "step_limit": STEP_LIMIT, "cost_limit": 0})
    result = agent.run(task)
    return str(result.get("exit_status", ""))
