"""The `gymfleet` typer app: every command and command group of :mod:`gymfleet.cli` registered.

Errors a user can cause (any GymfleetError, a disk that is full or read-only) are handled once,
for every command, by :class:`gymfleet.cli.errors.GymfleetGroup`: one line, exit status 2.
"""

from __future__ import annotations

import typer

from gymfleet.cli.collect import collect_command
from gymfleet.cli.envs import envs_app, rollout
from gymfleet.cli.errors import GymfleetGroup
from gymfleet.cli.eval import eval_app
from gymfleet.cli.runs import runs_app
from gymfleet.cli.serve import serve
from gymfleet.cli.sft import sft_command
from gymfleet.cli.images import images_app
from gymfleet.cli.learn import learn_command
from gymfleet.cli.sandbox import sandbox_app
from gymfleet.cli.train import train_command

app = typer.Typer(cls=GymfleetGroup, no_args_is_help=True, add_completion=False,
                  help="The `gymfleet` command line: one typer app, each command group in its own module.")
app.add_typer(envs_app, name="envs")
app.command("rollout")(rollout)
app.command("collect")(collect_command)
app.add_typer(runs_app, name="runs")
app.command("serve")(serve)
app.add_typer(images_app, name="images")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(eval_app, name="eval")
app.command("train")(train_command)
app.command("learn")(learn_command)
app.command("sft")(sft_command)
