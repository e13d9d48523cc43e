"""A demo gymfleet env plugin (see env.py); ``register`` is its ``gymfleet.envs`` entry point."""

import gymnasium

ENV_ID = "filesdemo/Files-v0"


def register() -> None:
    """Registers the demo env with Gymnasium (called once by gymfleet's plugin loader)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="gymfleet_files_demo.env:FilesEnv")
