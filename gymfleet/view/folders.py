"""A run's own folders, the only places the viewer serves files from, and what it reads there.

The roots of run ``R`` (each a name the URL carries, never a path):

* ``run``: ``<runs_dir>/R/`` (the store, report, metrics and bucket of a default run);
* ``report``: ``<runs_dir>/R/report/`` (``report.json``, the PNGs, ``learner.jsonl``);
* ``task0``, ``task1``...: each task's artifact folder from the run's config (``env_kwargs``
  ``screenshots_dir`` of browser tasks, ``runs_dir`` of slides), relative paths taken from the
  folder the viewer was started in, as the run took them.

A request names a root and a relative path; :meth:`RunFolders.resolve` refuses an absolute path,
any ``..``, a symlink that leads out of its root, and any kind of file not in :data:`SERVED`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gymfleet.trainer import STEPS_FILE
from gymfleet.view.errors import ArtifactRefusedError, NotFoundError

SERVED = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".txt": "text/plain; charset=utf-8",
          ".log": "text/plain; charset=utf-8", ".diff": "text/plain; charset=utf-8",
          ".patch": "text/plain; charset=utf-8", ".json": "text/plain; charset=utf-8",
          ".jsonl": "text/plain; charset=utf-8", ".html": "text/plain; charset=utf-8"}
"""The kinds of file served, and as what: text of any kind (a slide deck's HTML included) goes out
as ``text/plain`` with ``nosniff``, so no file from a run is ever rendered as a page."""
MAX_FILE_BYTES = 50 * 2**20
ARTIFACT_KWARGS = ("screenshots_dir", "runs_dir", "artifacts_dir")
"""Env arguments that name a folder of pictures (``AgentEnv.artifacts_kwarg`` of the built-in envs)."""


@dataclass(frozen=True)
class FileRef:
    """A file the viewer may serve: its root's name and its path under that root (``/``-separated)."""

    root: str
    path: str


@dataclass(frozen=True)
class RunFolders:
    """The folders of one run (see the module docstring).

    Args:
        roots: root name -> folder (need not exist).
    """

    roots: dict[str, Path]

    @classmethod
    def of(cls, run_id: str, runs_dir: Path, config: dict[str, Any], store_url: str | None = None) -> RunFolders:
        """The roots of ``run_id`` from the runs folder, its config and the store's own folder."""
        run_dir = runs_dir / run_id
        if store_url is not None and "://" not in store_url and Path(store_url).name == "store.db":
            run_dir = Path(store_url).parent  # --store runs/R/store.db: R's folder, wherever it is
        roots = {"run": run_dir, "report": run_dir / "report"}
        for i, task in enumerate(config.get("tasks") or []):
            kwargs = task.get("env_kwargs") or {} if isinstance(task, dict) else {}
            for key in ARTIFACT_KWARGS:
                if isinstance(kwargs.get(key), str) and kwargs[key]:
                    roots[f"task{i}"] = Path(kwargs[key].replace("{run_id}", run_id))
                    break
        return cls({name: Path(p).expanduser().absolute() for name, p in roots.items()})

    def ref(self, path: str | Path) -> FileRef | None:
        """The root-relative reference of a file named by an absolute or relative path (as a
        trajectory's metrics name it), or None when it lies outside every root."""
        target = Path(path).expanduser().absolute()
        for name, root in sorted(self.roots.items(), key=lambda kv: -len(str(kv[1]))):  # innermost first
            try:
                rel = target.relative_to(root)
            except ValueError:
                continue
            if ".." not in rel.parts:
                return FileRef(name, rel.as_posix())
        return None

    def resolve(self, root: str, path: str) -> tuple[Path, str]:
        """The file a request names, and its media type.

        Raises:
            ArtifactRefusedError: unknown root, an absolute path or ``..``, a path that leads out of
                its root (through a symlink too), or a kind of file never served.
            NotFoundError: no such file.
        """
        if root not in self.roots:
            raise ArtifactRefusedError(f"no folder {root!r} in this run; folders: {', '.join(sorted(self.roots))}")
        rel = PurePosixPath(path)
        if not path or "\x00" in path or "\\" in path or rel.is_absolute() or ".." in rel.parts:
            raise ArtifactRefusedError(f"refused {path!r}: a file is named by its path under the run's folder")
        media = SERVED.get(rel.suffix.lower())
        if media is None:
            raise ArtifactRefusedError(f"refused {path!r}: the viewer serves {', '.join(sorted(SERVED))} files only")
        base = self.roots[root].resolve()
        target = (base / rel).resolve()
        if not target.is_relative_to(base):
            raise ArtifactRefusedError(f"refused {path!r}: it leads out of the run's folder")
        if not target.is_file():
            raise NotFoundError(f"no file {path!r} in the run's {root} folder")
        if target.stat().st_size > MAX_FILE_BYTES:
            raise ArtifactRefusedError(f"refused {path!r}: larger than {MAX_FILE_BYTES >> 20} MiB")
        return target, media

    def report_files(self) -> list[FileRef]:
        """The report's PNGs and ``report.json``."""
        report = self.roots["report"]
        if not report.is_dir():
            return []
        inside = report.resolve()
        return [FileRef("report", p.name) for p in sorted(report.iterdir())
                if p.suffix in (".png", ".json") and p.is_file() and p.resolve().is_relative_to(inside)]

    def learner_steps(self, last: int = 50) -> tuple[int, list[dict[str, Any]]]:
        """How many steps the learner logged, and the ``last`` ones (``learner.jsonl``: loss,
        reward, version, staleness of the samples trained)."""
        path = self.roots["report"] / STEPS_FILE
        if not path.is_file():
            return 0, []
        steps = []
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line being written
                    continue
                if row.get("event") == "step" and row.get("n_groups", 0) > 0:
                    steps.append(row)
        keep = ("step", "t", "loss", "mean_reward", "version", "n_groups", "n_tokens", "masked_fraction", "kl",
                "mean_ratio", "duration_s", "idle_s", "published_version")
        return len(steps), [{k: s.get(k) for k in keep} | {"staleness": (s.get("filter") or {}).get("staleness", [])}
                            for s in (steps[-last:] if last > 0 else [])]
