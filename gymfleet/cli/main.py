"""The `gymfleet` typer app: every command and command group of :mod:`gymfleet.cli` registered.

Commands are imported on first use (:class:`gymfleet.cli.lazy.LazyGroup`): ``gymfleet --help``
loads none of the heavy stacks. Errors a user can cause (any GymfleetError, a disk that is full
or read-only) are handled once, for every command, by :class:`gymfleet.cli.errors.GymfleetGroup`:
one line, exit status 2.
"""

from __future__ import annotations

import typer

from gymfleet.cli.lazy import LazyCommand, LazyGroup

HELP = """Train LLM agents with reinforcement learning on tool-using environments
(terminal, browser, SWE, slides): sandboxed envs, an asynchronous rollout orchestrator,
a LoRA learner.

Start with:
  gymfleet envs list                        the environments you can train on
  gymfleet rollout --env ID --policy gold   play one scripted episode
  gymfleet train CONFIG.yaml                train an adapter (rerun to resume)
  gymfleet runs list                        stored runs (runs show RUN_ID)
  gymfleet view                             browse runs, groups and trajectories in a browser

Each command's --help says more (configs/ has examples, docs/ the guides)."""

COMMANDS: dict[str, LazyCommand] = {
    "envs": LazyCommand("gymfleet.cli.envs", "envs_app", "Registered environments: list, check."),
    "rollout": LazyCommand("gymfleet.cli.envs", "rollout",
                           "Plays a scripted policy (gold or noop) and prints each trajectory and its reward."),
    "train": LazyCommand("gymfleet.cli.train", "train_command",
                         "Trains a LoRA adapter with GRPO on the config's task mix; rerun to resume."),
    "sft": LazyCommand("gymfleet.cli.sft", "sft_command",
                       "Warm start: records gold demonstrations and trains the adapter on them (version 1)."),
    "runs": LazyCommand("gymfleet.cli.runs", "runs_app", "Stored runs: list, show, export."),
    "view": LazyCommand("gymfleet.cli.view", "view_command",
                        "The trajectory viewer: a local web app over the store (runs, groups, trajectories, live)."),
    "eval": LazyCommand("gymfleet.cli.eval", "eval_app",
                        "Evaluate predictions on benchmarks, or policies on held-out instances."),
    "collect": LazyCommand("gymfleet.cli.collect", "collect_command",
                           "Collects rollouts as the config says and stores every trajectory; rerun to resume."),
    "learn": LazyCommand("gymfleet.cli.learn", "learn_command",
                         "The learner alone: trains from the groups in a run's store, publishes adapter versions."),
    "serve": LazyCommand("gymfleet.cli.serve", "serve",
                         "Serve one replica over HTTP (completions with token ids and logprobs, LoRA load/unload)."),
    "adapters": LazyCommand("gymfleet.cli.adapters", "adapters_app",
                            "Published adapter versions: list them, export one as a PEFT folder (its base, a model card), push it to a hub."),
    "images": LazyCommand("gymfleet.cli.images", "images_app", "Container images (images/<name>/)."),
    "sandbox": LazyCommand("gymfleet.cli.sandbox", "sandbox_app", "Sandboxes (containers, local sandboxes)."),
}


class CommandGroup(LazyGroup):
    """The root group: :data:`COMMANDS`, each imported when it runs."""

    lazy_commands = COMMANDS


app = typer.Typer(cls=CommandGroup, no_args_is_help=True, add_completion=False, help=HELP)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v",
                                      help="Show third-party progress bars and warnings (model loading, PEFT).")) -> None:
    """Runs before every command: quiets third-party output unless --verbose."""
    from gymfleet.core.quiet import one_line_deprecations, quiet_third_party

    one_line_deprecations()
    if not verbose:
        quiet_third_party()
