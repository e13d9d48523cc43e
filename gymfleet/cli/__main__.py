"""``python -m gymfleet.cli``: the `gymfleet` command line."""

from gymfleet.cli.main import app

app()
