"""The `gymfleet` command line: one typer app, each command group in its own module."""

from __future__ import annotations

import typer

from gymfleet.cli_collect import collect_command
from gymfleet.cli_envs import envs_app, rollout
from gymfleet.cli_eval import eval_app
from gymfleet.cli_runs import runs_app
from gymfleet.cli_serve import serve
from gymfleet.cli_images import images_app
from gymfleet.cli_sandbox import sandbox_app
from gymfleet.cli_train import train_command

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.add_typer(envs_app, name="envs")
app.command("rollout")(rollout)
app.command("collect")(collect_command)
app.add_typer(runs_app, name="runs")
app.command("serve")(serve)
app.add_typer(images_app, name="images")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(eval_app, name="eval")
app.command("train")(train_command)

if __name__ == "__main__":
    app()
