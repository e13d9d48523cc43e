"""`--compare` grades with swebench's own code, which needs the fixtures' repositories in its
process-wide tables: they are there for one grading only, so later spec lookups in the same
process still come from gymfleet's table (the full suite once failed test_specs after it)."""

from __future__ import annotations

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.official import registered as _registered
from gymfleet.envs.swe.instances import load_instances
from gymfleet.envs.swe.specs import load_spec


def test_a_repository_swebench_does_not_know_is_registered_for_one_grading_only() -> None:
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    specs = upstream.constants().MAP_REPO_VERSION_TO_SPECS
    parsers = upstream.module("harness.log_parsers").MAP_REPO_TO_PARSER
    assert inst.repo not in specs and inst.repo not in parsers
    with _registered(spec):
        assert specs[inst.repo][inst.version]["test_cmd"] == spec.test_cmd
        assert parsers[inst.repo] is spec.parser()
    assert inst.repo not in specs and inst.repo not in parsers
    assert load_spec(inst.repo, inst.version).source.endswith("specs.yaml")


def test_swebenchs_own_entries_are_never_changed() -> None:
    spec = load_spec("psf/requests", "2.4")
    specs = upstream.constants().MAP_REPO_VERSION_TO_SPECS
    before = dict(specs["psf/requests"]["2.4"])
    with _registered(spec.model_copy(update={"test_cmd": "false"})):
        assert specs["psf/requests"]["2.4"] == before
    assert specs["psf/requests"]["2.4"] == before and "psf/requests" in specs
