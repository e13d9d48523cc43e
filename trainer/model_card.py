"""What makes an adapter version shareable: the base it was trained on, and its model card.

``save_pretrained`` records the base model as the folder the weights were loaded from (for the
embedded model, a de-quantised copy under ``~/.cache/gymfleet``), which means nothing on another
machine. :func:`make_shareable` rewrites ``base_model_name_or_path`` in ``adapter_config.json``
to the base model's hub id (:func:`gymfleet.core.models.hub_id`) and writes ``README.md``, a
model card in the Hugging Face format (YAML front matter, then markdown): the run, the policy
version, the learner step, recent rewards, held-out gains when known, what it was trained on
(envs, tasks, instances) and the training config.

A hub id names the right weights only when the run loaded them as they are on the hub. The
embedded model is de-quantised from a Q4_1 GGUF, whose weights differ from the hub's: an
exported version of such a run carries the exact base it was trained on in ``base/`` (hard
links where the file system allows, else a copy) and its ``adapter_config.json`` names
``base``, so ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(DIR / "base"), DIR)``
reproduces the run's policy offline (:func:`export_version`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gymfleet.core.models import EMBEDDED_GGUF, ModelSpec, hub_id, resolve_model_dir
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.core.errors import TrainError

ADAPTER_CONFIG = "adapter_config.json"
MODEL_CARD = "README.md"
PLAIN_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors", "adapter_model.bin", MODEL_CARD)
"""What an exported version holds: a plain PEFT folder and its card (no optimiser state, no manifest)."""
FULL_FILES = ("config.json", "generation_config.json", "model.safetensors", MODEL_CARD)
"""What an exported full-weight version (``learner.adapter: none``) holds: a transformers model
folder and its card."""
BASE_FOLDER = "base"
"""The folder of an export that holds the base weights the adapter was trained on (when carried)."""


@dataclass
class AdapterCard:
    """What a version's model card says.

    Attributes:
        run_id: the training run.
        version: the policy version (1, 2, ...).
        step: the learner step the adapter was saved at.
        base_model: the base model's hub id (or folder, when no hub id is known).
        config: how it was trained, as JSON: ``config`` (the learner's settings) and ``policy``
            (what the rollouts were sampled from: base model, sampling, staleness bound).
        recent_rewards: mean reward of the trainable samples of the last learner steps, by step.
        heldout: held-out pass@1 and gains (the report's ``evaluation``), when known.
        note: one line on how the version was made (e.g. the warm start).
        trained_on: per task name, its ``env_id`` and the ``instances`` the learner trained on
            (empty: not known, e.g. a version written before export).
        base_folder: the export's folder holding the base weights (:data:`BASE_FOLDER`), when
            the hub id does not name the weights trained on; None: load the base by ``base_model``.
        base_origin: where the carried base's weights come from (one line).
    """

    run_id: str
    version: int
    step: int
    base_model: str
    config: dict[str, Any]
    recent_rewards: dict[int, float] = field(default_factory=dict)
    heldout: dict[str, Any] | None = None
    note: str = ""
    trained_on: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_folder: str | None = None
    base_origin: str = ""

    def render(self) -> str:
        """The card's text (``README.md``)."""
        front = {"base_model": self.base_model, "library_name": "peft",
                 "tags": ["gymfleet", "lora", "grpo", "reinforcement-learning"]}
        lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
                 f"# {self.run_id} v{self.version:06d}", "",
                 f"A LoRA adapter of `{self.base_model}` trained with gymfleet (GRPO on tool-using environments).",
                 *([self.note] if self.note else []), "",
                 f"- run: `{self.run_id}`", f"- policy version: {self.version}", f"- learner step: {self.step}", "",
                 *self._load_lines(), "", *self._trained_on_lines(), "", "## Recent rewards", ""]
        if self.recent_rewards:
            lines += ["| step | mean reward |", "|---:|---:|",
                      *(f"| {step} | {reward:.3f} |" for step, reward in sorted(self.recent_rewards.items()))]
        else:
            lines.append("None recorded (no learner step before this version).")
        lines += ["", "## Held-out evaluation", "", *_heldout_lines(self.heldout), "",
                  "## Training config", "", "```yaml", yaml.safe_dump(self.config, sort_keys=False).strip(), "```", ""]
        return "\n".join(lines)


    def _load_lines(self) -> list[str]:
        if self.base_folder is None:
            return ["## Load", "", "```python", "from peft import PeftModel",
                    "from transformers import AutoModelForCausalLM", "",
                    f'base = AutoModelForCausalLM.from_pretrained("{self.base_model}")',
                    'model = PeftModel.from_pretrained(base, "PATH_OR_REPO_OF_THIS_FOLDER")', "```"]
        return ["## Base model", "",
                f"Trained on the weights in `{self.base_folder}/` of this folder: {self.base_origin} They differ "
                f"from the hub's `{self.base_model}`; load `{self.base_folder}/` (offline, no download) to get the "
                "policy the run trained.", "", "## Load", "", "```python", "from pathlib import Path", "",
                "from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                'folder = Path("PATH_OF_THIS_FOLDER")',
                f'tokenizer = AutoTokenizer.from_pretrained(folder / "{self.base_folder}")',
                f'base = AutoModelForCausalLM.from_pretrained(folder / "{self.base_folder}")',
                "model = PeftModel.from_pretrained(base, folder)", "```"]

    def _trained_on_lines(self) -> list[str]:
        lines = ["## Trained on", ""]
        if not self.trained_on:
            return [*lines, "Not recorded with this version (`gymfleet adapters export` adds it from the run's store)."]
        lines += ["| task | env | instances |", "|---|---|---|"]
        for task, about in sorted(self.trained_on.items()):
            ids = [str(i) for i in about.get("instances") or []]
            shown = ", ".join(f"`{i}`" for i in ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
            lines.append(f"| {task} | `{about.get('env_id', '?')}` | {shown or '-'} ({len(ids)}) |")
        return lines


def _heldout_lines(evaluation: dict[str, Any] | None) -> list[str]:
    if not evaluation or not evaluation.get("by_family"):
        return ["Not known when this version was written (`gymfleet adapters export` adds it from the "
                "run's report.json once the held-out evaluation ran)."]
    policies = [f"{p.get('name')} (v{p.get('version') or 0})" for p in evaluation.get("policies") or []
                if isinstance(p, dict)]
    lines = [*([f"Policies: {', '.join(policies)}.", ""] if policies else []),
             "| family | policy | pass@1 | SE | n |", "|---|---|---:|---:|---:|"]
    for family, by_policy in sorted(dict(evaluation["by_family"]).items()):
        for policy, score in dict(by_policy).items():
            score = score if isinstance(score, dict) else {}
            lines.append(f"| {family} | {policy} | {_number(score.get('pass_at_1'))} | {_number(score.get('se'))} "
                         f"| {score.get('n', '-')} |")
    gains = evaluation.get("gains") or {}
    if gains:
        lines += ["", "| family | gain | delta | SE |", "|---|---|---:|---:|"]
        for family, by_name in sorted(dict(gains).items()):
            for name, gain in dict(by_name).items():
                if isinstance(gain, dict):
                    lines.append(f"| {family} | {name} | {_number(gain.get('delta'))} | {_number(gain.get('se'))} |")
    return lines


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def make_shareable(folder: Path, card: AdapterCard) -> None:
    """Names ``card.base_model`` as the base in ``folder/adapter_config.json`` and writes the
    card as ``folder/README.md`` (replacing peft's template, if any).

    Raises:
        FileNotFoundError: ``folder`` holds no ``adapter_config.json`` (not a PEFT folder).
    """
    path = Path(folder) / ADAPTER_CONFIG
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = card.base_folder or card.base_model
    path.write_text(json.dumps(config, indent=2, sort_keys=True))
    (Path(folder) / MODEL_CARD).write_text(card.render())


def _base_spec(meta: dict[str, Any]) -> ModelSpec | None:
    """The base model a version was trained on, from its ``meta.json`` (older versions kept it in
    the learner config)."""
    config = {k: meta[k] for k in ("config", "policy") if isinstance(meta.get(k), dict)}
    model = (config.get("policy") or {}).get("model", (config.get("config") or {}).get("model"))
    return ModelSpec.model_validate(model) if model is not None else None


def card_from_meta(run_id: str, meta: dict[str, Any], heldout: dict[str, Any] | None = None,
                   trained_on: dict[str, dict[str, Any]] | None = None) -> AdapterCard:
    """The card of a published version from its ``meta.json`` (and the run's held-out section and
    what it was trained on, when known)."""
    config = {k: meta[k] for k in ("config", "policy") if isinstance(meta.get(k), dict)}
    spec = _base_spec(meta)
    base = hub_id(spec) if spec is not None else "unknown"
    rewards = {int(step): float(r) for step, r in dict(meta.get("recent_rewards") or {}).items()}
    warm = meta.get("warm_start")
    note = f"Warm start: supervised fine-tuning on {warm.get('n_demonstrations')} gold demonstrations." \
        if isinstance(warm, dict) else ""
    return AdapterCard(run_id, int(meta.get("version", 0)), int(meta.get("step", 0)), base, config, rewards,
                       heldout, note, dict(trained_on or {}))


def carries_base(spec: ModelSpec) -> bool:
    """Whether an export must carry the base: its weights are not what a hub id names as they
    are (a GGUF de-quantised here, the embedded model, or a local folder)."""
    return bool(spec.is_embedded or spec.gguf_file or Path(spec.name_or_path).exists())


def carry_base(spec: ModelSpec, dest: Path) -> str:
    """Puts the base weights ``spec`` loads (the de-quantised copy for a GGUF) into ``dest``:
    hard links when ``dest`` is on the same file system, else copies. Returns where they come from.

    Raises:
        ModelError: the base cannot be had (the embedded package missing, a GGUF file gone).
    """
    source = Path(resolve_model_dir(spec))
    dest.mkdir(parents=True)
    for f in sorted(source.iterdir()):
        if not f.is_file():
            continue
        try:
            os.link(f, dest / f.name)
        except OSError:  # another file system, or links refused
            shutil.copyfile(f, dest / f.name)
        # readable by all, as a shared folder's reader needs (the cache's weights file was 0600:
        # a link keeps its mode, and the cache copy it shares an inode with gets the same)
        os.chmod(dest / f.name, (dest / f.name).stat().st_mode | 0o444)
    gguf = EMBEDDED_GGUF if spec.is_embedded else spec.gguf_file
    if gguf:
        return (f"`{gguf}` (the GGUF gymfleet loads for {hub_id(spec)}), de-quantised by transformers to "
                f"{spec.dtype} tensors.")
    return f"the local folder {spec.name_or_path}."


def export_version(bucket: AdapterBucket, version: int, dest: Path,
                   heldout: dict[str, Any] | None = None, trained_on: dict[str, dict[str, Any]] | None = None,
                   *, with_base: bool = True) -> Path:
    """Copies ``version`` out of ``bucket`` into ``dest`` as a plain PEFT folder
    (:data:`PLAIN_FILES`) that ``PeftModel.from_pretrained(base, dest)`` loads anywhere (a
    full-weight version: a transformers folder, :data:`FULL_FILES`, for
    ``AutoModelForCausalLM.from_pretrained(dest)``, with its card): the files
    are checked against the version's manifest, the card rewritten with ``heldout`` (the run
    report's ``evaluation``) and ``trained_on`` when given. When the base's weights are not what
    its hub id names (:func:`carries_base`), they go into ``dest/base`` and ``adapter_config.json``
    names ``base``; else it names the hub id.

    Args:
        with_base: False: never carry the base (the card then names the hub id only).

    Returns:
        ``dest``.

    Raises:
        TrainError: ``dest`` exists and is not an empty folder.
        BucketError: the version is missing or not committed.
        BucketCorruptError: its files do not match its manifest.
        ModelError: the base to carry cannot be had.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TrainError(f"{dest} exists and is not an empty folder: export into a new folder")
    with tempfile.TemporaryDirectory() as tmp:
        local = bucket.fetch(version, Path(tmp))
        meta = json.loads((local / "meta.json").read_text())
        full = not (local / ADAPTER_CONFIG).is_file() and (local / "model.safetensors").is_file()
        dest.mkdir(parents=True, exist_ok=True)
        for name in FULL_FILES if full else PLAIN_FILES:
            if (local / name).is_file():
                shutil.copyfile(local / name, dest / name)
    card = card_from_meta(bucket.run_id, meta, heldout, trained_on)
    if full:  # the whole model: no base to name or carry
        (dest / MODEL_CARD).write_text(card.render())
        return dest
    spec = _base_spec(meta)
    if spec is not None and with_base and carries_base(spec):
        card.base_origin = carry_base(spec, dest / BASE_FOLDER)
        card.base_folder = BASE_FOLDER
    make_shareable(dest, card)
    return dest

