"""The orchestrator's public face: the names the app (``gymfleet.run``), the command line and the
viewer use, loaded on first use (importing the package imports no engine, database driver or torch).

Code outside this package imports from ``gymfleet.orchestrator`` only (``tests/test_layers.py``
checks it); the trainer, which reads the store and nothing else of the orchestrator, imports
``gymfleet.orchestrator.store``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymfleet.core.lazy import lazy_exports

_EXPORTS = {
    # the run's config
    "RunConfig": ".config", "TaskConfig": ".config", "PolicyConfig": ".config", "load_run_config": ".config",
    "fill_run_id": ".config", "read_config_document": ".config", "RunSampling": ".run_settings",
    "ConfigDeprecationWarning": ".run_settings",
    # the policy: gateway, engines, replicas
    "PolicyGateway": ".protocols", "Gateway": ".gateway", "GatewayConfig": ".gateway",
    "ScriptedRepliesEngine": ".http.forcing", "open_gateway": ".policy",
    "DemonstrationGateway": ".teacher_forcing", "TransformersEngine": ".engines.transformers_engine",
    "TransformersEngineConfig": ".engines.config", "VLLMEngineConfig": ".engines.vllm",
    "VLLMServer": ".engines.vllm_launcher", "VLLMServerConfig": ".engines.vllm_launcher",
    "ReplicaLaunchError": ".engines.errors", "build_app": ".engines.server", "build_admin_app": ".engines.server",
    "serve_listeners": ".engines.listeners", "bind_admin_socket": ".engines.listeners",
    "bind_inference_socket": ".engines.listeners",
    # rollouts and the scheduler
    "EnvFactory": ".rollout", "env_factory": ".envfactory", "resolve_instances": ".envfactory",
    "task_needs": ".envfactory", "unmet_needs": ".envfactory", "HARNESS_ENV_ID": ".harness_rollout",
    "open_harness_rollouts": ".harness_rollout", "Scheduler": ".scheduler", "RunOutcome": ".scheduler",
    "Admission": ".admission", "LearnerProgress": ".admission",
    "RunStats": ".progress", "MetricsWriter": ".metrics", "group_id_of": ".workload", "run_loop": ".loop",
    # the trajectory store
    "TrajectoryStore": ".store", "RunNotFoundError": ".store.errors",
    "RunStatus": ".store.schema", "RunRow": ".store.schema", "GroupRow": ".store.schema",
    "SampleRow": ".store.schema", "SampleState": ".store.schema", "TrajectoryRow": ".store.schema",
    "RunSummary": ".store.queries", "StoredTrajectory": ".store.queries", "DTYPES": ".store.codec",
    "bytes_to_array": ".store.codec", "display_url": ".store.engine", "normalise_url": ".store.engine",
    "summarise_db_error": ".store.engine",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the names as a type checker and a reader see them
    from gymfleet.orchestrator.admission import Admission, LearnerProgress
    from gymfleet.orchestrator.config import (
        PolicyConfig, RunConfig, TaskConfig, fill_run_id, load_run_config, read_config_document)
    from gymfleet.orchestrator.run_settings import ConfigDeprecationWarning, RunSampling
    from gymfleet.orchestrator.engines.config import TransformersEngineConfig
    from gymfleet.orchestrator.engines.errors import ReplicaLaunchError
    from gymfleet.orchestrator.engines.listeners import bind_admin_socket, bind_inference_socket, serve_listeners
    from gymfleet.orchestrator.engines.server import build_admin_app, build_app
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine
    from gymfleet.orchestrator.engines.vllm import VLLMEngineConfig
    from gymfleet.orchestrator.engines.vllm_launcher import VLLMServer, VLLMServerConfig
    from gymfleet.orchestrator.envfactory import env_factory, resolve_instances, task_needs, unmet_needs
    from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
    from gymfleet.orchestrator.http.forcing import ScriptedRepliesEngine
    from gymfleet.orchestrator.harness_rollout import HARNESS_ENV_ID, open_harness_rollouts
    from gymfleet.orchestrator.loop import run_loop
    from gymfleet.orchestrator.metrics import MetricsWriter
    from gymfleet.orchestrator.policy import open_gateway
    from gymfleet.orchestrator.progress import RunStats
    from gymfleet.orchestrator.protocols import PolicyGateway
    from gymfleet.orchestrator.rollout import EnvFactory
    from gymfleet.orchestrator.scheduler import RunOutcome, Scheduler
    from gymfleet.orchestrator.store import TrajectoryStore
    from gymfleet.orchestrator.store.codec import DTYPES, bytes_to_array
    from gymfleet.orchestrator.store.engine import display_url, normalise_url, summarise_db_error
    from gymfleet.orchestrator.store.errors import RunNotFoundError
    from gymfleet.orchestrator.store.queries import RunSummary, StoredTrajectory
    from gymfleet.orchestrator.store.schema import GroupRow, RunRow, RunStatus, SampleRow, SampleState, TrajectoryRow
    from gymfleet.orchestrator.teacher_forcing import DemonstrationGateway
    from gymfleet.orchestrator.workload import group_id_of

__getattr__ = lazy_exports(__name__, _EXPORTS)
