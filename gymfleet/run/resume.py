"""What a resumed run may not change: the settings its published adapters were trained with,
read from the newest version's ``meta.json`` and compared with the config before anything starts.

A rerun resumes the adapter and optimiser state of the run's newest version; a different base
model, LoRA shape (or full fine-tuning instead of LoRA) or dtype cannot load them (peft prints a ``size mismatch`` per tensor) or
would train a different model under the same run id. Such a change is refused in one line
naming the key and both values, before a rollout is generated or a file written.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import JsonValue

from gymfleet.core.errors import ConfigError
from gymfleet.run.config import TrainConfig
from gymfleet.trainer import AdapterBucket, BucketError


Meta = dict[str, JsonValue]
"""A version's ``meta.json``."""
Setting = JsonValue | tuple[str, str | None]
"""A compared setting's value (the model: ``(name_or_path, gguf_file)``)."""


def _section(meta: Meta, name: str) -> Meta:
    section = meta.get(name)
    return section if isinstance(section, dict) else {}


def _model(meta: Meta) -> Setting:
    model = _section(_section(meta, "policy"), "model")
    name, gguf = model.get("name_or_path"), model.get("gguf_file")
    if not isinstance(name, str) or not name:
        return None
    return (name, gguf if isinstance(gguf, str) else None)


def _learner(key: str) -> Callable[[Meta], Setting]:
    return lambda meta: _section(meta, "config").get(key)


FROZEN: dict[str, tuple[Callable[[TrainConfig], Setting], Callable[[Meta], Setting]]] = {
    "policy.model": (lambda cfg: (cfg.run.policy.model.name_or_path, cfg.run.policy.model.gguf_file), _model),
    "learner.dtype": (lambda cfg: cfg.learner.dtype, _learner("dtype")),
    "learner.adapter": (lambda cfg: cfg.learner.adapter, _learner("adapter")),
    "learner.lora_rank": (lambda cfg: cfg.learner.lora_rank, _learner("lora_rank")),
    "learner.lora_alpha": (lambda cfg: cfg.learner.lora_alpha, _learner("lora_alpha")),
    "learner.target_modules": (lambda cfg: list(cfg.learner.target_modules), _learner("target_modules")),
}
"""Per config key: its value in the config, and its value in a version's ``meta.json``
(``config``: the learner's settings, ``policy``: the rollout policy, :meth:`Learner.meta`)."""


LORA_SHAPE = ("learner.lora_rank", "learner.lora_alpha", "learner.target_modules")
"""The :data:`FROZEN` keys that only a LoRA run has."""


def _shown(value: Setting) -> str:
    if isinstance(value, tuple):  # (name_or_path, gguf_file)
        return value[0] + (f" ({value[1]})" if value[1] else "")
    return str(value)


def changed_settings(cfg: TrainConfig, meta: Meta) -> list[tuple[str, Setting, Setting]]:
    """The :data:`FROZEN` keys whose config value differs from ``meta``'s, as (key, run's, config's);
    a key ``meta`` does not record (an older version) is not compared."""
    changed: list[tuple[str, Setting, Setting]] = []
    for key, (in_config, in_meta) in FROZEN.items():
        if key in LORA_SHAPE and cfg.learner.adapter == "none" and _learner("adapter")(meta) == "none":
            continue  # full fine-tuning has no LoRA shape
        then, now = in_meta(meta), in_config(cfg)
        if then is not None and then != now:
            changed.append((key, then, now))
    return changed


def refuse_changed_settings(cfg: TrainConfig) -> None:
    """Refuses a rerun whose config changes what the run's newest published version was trained with.

    Raises:
        ConfigError: a :data:`FROZEN` key differs; the message names each key, the run's value
            and the config's, and the two ways out (undo the change, or a new run id).
    """
    bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
    newest = bucket.newest_version()
    if not newest:
        return
    try:
        meta = bucket.get(newest).meta
    except BucketError:  # a damaged newest version: the learner skips it (and says so)
        return
    changed = changed_settings(cfg, meta)
    if changed:
        what = "; ".join(f"{key} is {_shown(then)} in the run (v{newest}), {_shown(now)} in the config"
                         for key, then, now in changed)
        raise ConfigError(f"run {cfg.run.run_id} cannot resume with changed settings: {what}; undo the change "
                          f"to resume, or start a new run with --set run_id=NEW_ID")
