"""The error tree of gymfleet: one root, one subtree per boundary a failure crosses.

``except GymfleetError`` catches everything gymfleet raises on purpose; each boundary's root
(config, env, sandbox, inference, store, train) catches that boundary's failures. The roots live
here; the leaves live next to the code that raises them (``envs/errors.py``,
``orchestrator/errors.py``, ``orchestrator/engines/errors.py``, ``orchestrator/store/errors.py``,
``trainer/errors.py``, ``orchestrator/http/errors.py``, ``gymfleet/view/errors.py``, and the env families'
``errors.py``) and keep their names.

Class tree::

    GymfleetError                         anything gymfleet raises on purpose
    ├── ConfigError (ValueError)          a config, override or argument that cannot be used; names the fix
    │   └── ModelError                    a model cannot be found or loaded (core/models.py)
    ├── RunCompleteError                  a rerun of a run already at budget.max_steps (run/job.py; exit 0)
    ├── EnvError                          an env, task or image failed (envs/errors.py)
    │   ├── SandboxError                  a sandbox could not be used (infrastructure)
    │   │   ├── SandboxUnavailableError   the backend is missing (no daemon, no bubblewrap)
    │   │   ├── SandboxStartError         a sandbox did not start
    │   │   ├── SandboxClosedError        used after close()
    │   │   ├── SandboxFileError          put_file / get_file failed
    │   │   ├── SandboxLostError          removed, stopped or restarted from outside mid-command
    │   │   └── BrowserStartError         Chromium did not start (envs/browser/errors.py)
    │   ├── SandboxDamagedError           the policy broke its own sandbox: NOT infrastructure
    │   ├── ImageBuildError               `gymfleet images build` failed
    │   │   └── AgentInstallError         a CLI agent could not be installed into a task image
    │   ├── UnknownEnvError (KeyError)    an env id that is not registered
    │   ├── TaskError                     a task folder or instance is malformed (browser, slides leaves)
    │   └── SWEError, SlidesError, BrowserActionError   the families' own (envs/*/errors.py)
    ├── InferenceError                    engines, router, gateway (orchestrator/engines/errors.py)
    │   ├── RequestError                  ContextLengthError, UnknownAdapterError: not retried
    │   ├── ReplicaError                  ReplicaUnavailableError, ReplicaTimeoutError, ReplicaServerError
    │   ├── NoReplicaError, AdapterError, AdapterPublishError, ChatTemplateError
    │   ├── ReplicaLaunchError            a vLLM server did not start (VLLMNotInstalledError: no vLLM found)
    │   ├── ParityError                   a replica's logprobs disagree with the learner's at start-up
    │   ├── PolicyError                   the policy produced something unusable -> policy_error
    │   └── EngineError                   an engine failed or is unreachable -> infra_error
    ├── WireError                         a request the HTTP gateway refuses, with its HTTP status (orchestrator/http/errors.py)
    │   └── BadRequestError, UnknownSessionError, ClosedSessionError, TooLargeError, CallFailedError
    ├── ViewError                         the trajectory viewer cannot answer (gymfleet/view/errors.py)
    │   └── NoStoreError (ConfigError), NotFoundError (KeyError), ArtifactRefusedError
    ├── StoreError                        the trajectory store (orchestrator/store/errors.py)
    │   ├── StoreURLError (ValueError), StoreOpenError, StoreClosedError, StoreWriteError
    │   ├── ClaimExpiredError             ack/release of a claim that was re-claimed
    │   ├── RunBusyError                  a SQLite run another live orchestrator holds (use PostgreSQL)
    │   ├── LearnerBusyError              a run another live learner trains (one learner per run)
    │   └── RunNotFoundError (KeyError)
    └── TrainError                        the learner side (trainer/errors.py)
        ├── BucketError                   the adapter bucket cannot be read or written
        │   └── BucketCorruptError        a committed version that does not read back (skipped, kept)
        └── RankLostError                 a data-parallel learner rank died mid-step (the step fails)

The sandbox subtree sits under the env subtree: a sandbox is an env's resource, and callers that
catch ``EnvError`` around an episode keep catching sandbox failures. Each class has one name and
one import path: the roots are imported from here only (no leaf module or package face re-exports one;
``tests/core/test_errors.py`` checks it).
"""

from __future__ import annotations


class GymfleetError(Exception):
    """Base class of every error gymfleet raises on purpose."""


class ConfigError(GymfleetError, ValueError):
    """A config, override or argument that cannot be used; the message names the field and the fix."""


class EnvError(GymfleetError):
    """An environment, task or image failed (base of ``gymfleet.envs.errors``)."""


class SandboxError(EnvError):
    """A sandbox could not be used; an infrastructure failure, never the policy's fault."""


class InferenceError(GymfleetError):
    """Base class of the inference layer's errors: engines, the router, the TITO gateway."""


class StoreError(GymfleetError):
    """Base class of every trajectory store error."""


class TrainError(GymfleetError):
    """Base class of the learner side's errors (learner, bucket)."""
