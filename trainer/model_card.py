"""What makes an adapter version shareable: its base model named by hub id, and its model card.

``save_pretrained`` records the base model as the folder the weights were loaded from (for the
embedded model, a de-quantised copy under ``~/.cache/gymfleet``), which means nothing on another
machine. :func:`make_shareable` rewrites ``base_model_name_or_path`` in ``adapter_config.json``
to the base model's hub id (:func:`gymfleet.core.models.hub_id`) and writes ``README.md``, a
model card in the Hugging Face format (YAML front matter, then markdown): the run, the policy
version, the learner step, recent rewards, held-out gains when known, and the training config.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gymfleet.core.models import ModelSpec, hub_id
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.errors import TrainError

ADAPTER_CONFIG = "adapter_config.json"
MODEL_CARD = "README.md"
PLAIN_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors", "adapter_model.bin", MODEL_CARD)
"""What an exported version holds: a plain PEFT folder and its card (no optimiser state, no manifest)."""


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
    """

    run_id: str
    version: int
    step: int
    base_model: str
    config: dict[str, Any]
    recent_rewards: dict[int, float] = field(default_factory=dict)
    heldout: dict[str, Any] | None = None
    note: str = ""

    def render(self) -> str:
        """The card's text (``README.md``)."""
        front = {"base_model": self.base_model, "library_name": "peft",
                 "tags": ["gymfleet", "lora", "grpo", "reinforcement-learning"]}
        lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
                 f"# {self.run_id} v{self.version:06d}", "",
                 f"A LoRA adapter of `{self.base_model}` trained with gymfleet (GRPO on tool-using environments).",
                 *([self.note] if self.note else []), "",
                 f"- run: `{self.run_id}`", f"- policy version: {self.version}", f"- learner step: {self.step}", "",
                 "## Load", "", "```python", "from peft import PeftModel",
                 "from transformers import AutoModelForCausalLM", "",
                 f'base = AutoModelForCausalLM.from_pretrained("{self.base_model}")',
                 'model = PeftModel.from_pretrained(base, "PATH_OR_REPO_OF_THIS_FOLDER")', "```", "",
                 "## Recent rewards", ""]
        if self.recent_rewards:
            lines += ["| step | mean reward |", "|---:|---:|",
                      *(f"| {step} | {reward:.3f} |" for step, reward in sorted(self.recent_rewards.items()))]
        else:
            lines.append("None recorded (no learner step before this version).")
        lines += ["", "## Held-out evaluation", "", *_heldout_lines(self.heldout), "",
                  "## Training config", "", "```yaml", yaml.safe_dump(self.config, sort_keys=False).strip(), "```", ""]
        return "\n".join(lines)


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
    config["base_model_name_or_path"] = card.base_model
    path.write_text(json.dumps(config, indent=2, sort_keys=True))
    (Path(folder) / MODEL_CARD).write_text(card.render())


def card_from_meta(run_id: str, meta: dict[str, Any], heldout: dict[str, Any] | None = None) -> AdapterCard:
    """The card of a published version from its ``meta.json`` (and the run's held-out section)."""
    config = {k: meta[k] for k in ("config", "policy") if isinstance(meta.get(k), dict)}
    # the base model: the rollout policy's (older versions kept it in the learner config)
    model = (config.get("policy") or {}).get("model", (config.get("config") or {}).get("model"))
    base = hub_id(ModelSpec.model_validate(model)) if model is not None else "unknown"
    rewards = {int(step): float(r) for step, r in dict(meta.get("recent_rewards") or {}).items()}
    warm = meta.get("warm_start")
    note = f"Warm start: supervised fine-tuning on {warm.get('n_demonstrations')} gold demonstrations." \
        if isinstance(warm, dict) else ""
    return AdapterCard(run_id, int(meta.get("version", 0)), int(meta.get("step", 0)), base, config, rewards,
                       heldout, note)


def export_version(bucket: AdapterBucket, version: int, dest: Path,
                   heldout: dict[str, Any] | None = None) -> Path:
    """Copies ``version`` out of ``bucket`` into ``dest`` as a plain PEFT folder
    (:data:`PLAIN_FILES`) that ``PeftModel.from_pretrained(base, dest)`` loads anywhere: the files
    are checked against the version's manifest, the base named by hub id (older versions named a
    cache folder), the card rewritten with ``heldout`` (the run report's ``evaluation``) when given.

    Returns:
        ``dest``.

    Raises:
        TrainError: ``dest`` exists and is not an empty folder.
        BucketError: the version is missing or not committed.
        BucketCorruptError: its files do not match its manifest.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TrainError(f"{dest} exists and is not an empty folder: export into a new folder")
    with tempfile.TemporaryDirectory() as tmp:
        local = bucket.fetch(version, Path(tmp))
        meta = json.loads((local / "meta.json").read_text())
        dest.mkdir(parents=True, exist_ok=True)
        for name in PLAIN_FILES:
            if (local / name).is_file():
                shutil.copyfile(local / name, dest / name)
    card = card_from_meta(bucket.run_id, meta, heldout)
    if heldout is not None or not (dest / MODEL_CARD).is_file() or card.base_model != _base_of(dest):
        make_shareable(dest, card)
    return dest


def _base_of(folder: Path) -> str:
    return str(json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path", ""))
