"""The config docs/train.md shows is one a user can run: it loads as a strict TrainConfig, and
``policy.kind`` (the builder) and ``policy.model`` (the weights) appear as the shipped configs
write them (the page used to show ``policy: model: embedded`` only, where configs say
``policy: kind: embedded``: two different keys that read as one)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gymfleet.run.config import train_config_from_dict

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_in_docs_train_md_loads_and_names_both_policy_keys() -> None:
    page = (ROOT / "docs" / "train.md").read_text()
    block = re.search(r"## The config.*?```yaml\n(.*?)```", page, re.S)
    assert block is not None
    data = yaml.safe_load(block.group(1))
    cfg = train_config_from_dict(data, "docs/train.md")  # strict: a wrong key raises
    assert cfg.run.policy.kind == "embedded" and cfg.run.policy.model.is_embedded
    assert {"kind", "model"} <= set(data["policy"])
    shipped = yaml.safe_load((ROOT / "configs" / "train-default.yaml").read_text())
    assert shipped["policy"]["kind"] == data["policy"]["kind"]
