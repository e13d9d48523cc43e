"""smolagents' ``ToolCallingAgent``, unmodified, on a gymfleet sandbox: a ``bash`` tool over the
:class:`SandboxBridge`, its ``OpenAIModel`` pointed at the session's gateway URL (Chat Completions
with tools). Its ``final_answer`` tool is how it submits.
"""

from __future__ import annotations

from typing import Any

from gymfleet.envs.harness.bridge import SandboxBridge

MAX_STEPS = 12
"""Model calls a smolagents episode may make (its ``max_steps``)."""


def _bash_tool(bridge: SandboxBridge) -> Any:
    from smolagents import Tool

    class BashTool(Tool):
        name = "bash"
        description = "Execute a bash command in the task's sandbox; returns its exit code and output."
        inputs = {"command": {"type": "string", "description": "The bash command to execute"}}
        output_type = "string"

        def forward(self, command: str) -> str:
            return bridge.execute(command).output

    return BashTool()


def run_smolagents(task: str, base_url: str, bridge: SandboxBridge) -> str:
    """Runs smolagents' ``ToolCallingAgent`` on ``task`` (in the calling worker thread).

    Returns:
        ``Submitted`` when it called ``final_answer``, else its final state (``max_steps_error``).

    Raises:
        Exception: whatever the harness raised (a crash; the rollout classifies it).
    """
    from smolagents import OpenAIModel, ToolCallingAgent

    model = OpenAIModel(model_id="gymfleet", api_base=base_url, api_key="gymfleet", client_kwargs={"max_retries": 0})
    agent = ToolCallingAgent(tools=[_bash_tool(bridge)], model=model, max_steps=MAX_STEPS, verbosity_level=0)
    result = agent.run(task, return_full_result=True)
    if result.state == "success":
        bridge.submit()
        return "Submitted"
    return str(result.state)
