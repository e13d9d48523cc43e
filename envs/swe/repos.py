"""Where task repositories come from: a mirror directory of git repositories, or GitHub.

A mirror (``--repo-mirror DIR``) serves machines with no GitHub. For ``owner/name`` it may hold
any of ``owner__name.bundle`` (a ``git bundle``), ``owner__name.git`` / ``owner__name`` (bare or
working repositories, shallow ones included), ``owner/name.git`` / ``owner/name``, or
``owner+name/repo`` (the layout of a directory of fetched snapshots). Without a match, and when
``allow_clone`` is set, the repository is cloned from ``https://github.com/owner/name.git``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gymfleet.envs.swe.errors import RepoNotFoundError

GITHUB_URL = "https://github.com/{repo}.git"
CLONE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RepoSource:
    """Finds and clones task repositories.

    Attributes:
        mirrors: mirror directories, searched in order.
        allow_clone: clone from GitHub when no mirror has the repository.
    """

    mirrors: Sequence[Path] = ()
    allow_clone: bool = True

    def locate(self, repo: str) -> str:
        """A path or URL ``git clone`` accepts for ``repo``.

        Raises:
            RepoNotFoundError: no mirror holds it and cloning is off.
        """
        owner, _, name = repo.partition("/")
        for mirror in self.mirrors:
            for candidate in (
                mirror / f"{owner}__{name}.bundle",
                mirror / f"{owner}__{name}.git",
                mirror / f"{owner}__{name}",
                mirror / owner / f"{name}.git",
                mirror / owner / name,
                mirror / f"{owner}+{name}" / "repo",
            ):
                if candidate.exists():
                    return str(candidate)
        if self.allow_clone:
            return GITHUB_URL.format(repo=repo)
        searched = ", ".join(str(m) for m in self.mirrors) or "no mirror given"
        raise RepoNotFoundError(
            f"repository {repo} is not in the mirror ({searched}) and cloning is off: put "
            f"{owner}__{name}.bundle (git bundle create ... --all) or a clone in the mirror"
        )

    def clone(self, repo: str, dest: Path, commit: str) -> None:
        """Clones ``repo`` into ``dest`` (all history) and checks out ``commit``.

        Raises:
            RepoNotFoundError: the clone failed or ``commit`` is not in the repository.
        """
        source = self.locate(repo)
        for args in (
            ["git", "clone", "--quiet", "--no-checkout", source, str(dest)],
            ["git", "-C", str(dest), "-c", "advice.detachedHead=false", "checkout", "-q", commit],
        ):
            try:
                out = subprocess.run(args, capture_output=True, text=True, timeout=CLONE_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                raise RepoNotFoundError(f"`{' '.join(args)}` timed out") from exc
            if out.returncode != 0:
                raise RepoNotFoundError(
                    f"`{' '.join(args)}` failed ({source}): {out.stderr.strip()[-500:]}"
                )

    def check_tree(self, repo: str, commit: str, git_dir: str | None = None) -> None:
        """Checks that every object of ``commit``'s tree is present (a partial mirror fails here
        in one line, not later in a raw git error at the image's reset). Reads the mirror in
        place (``git_dir``: a clone to read instead); bundles and URLs are not checked.

        Raises:
            RepoNotFoundError: the commit, a tree or a blob of it is missing (named).
        """
        if git_dir is None:
            source = self.locate(repo)
            if source.endswith(".bundle") or "://" in source:
                return
            git_dir = _git_dir(source)
        where = f"{repo} ({git_dir})"
        listed = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--full-tree",
                                 commit], capture_output=True, text=True, timeout=300)
        if listed.returncode != 0:
            last = (listed.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise RepoNotFoundError(f"{where} cannot list the tree of {commit}: {last}; "
                                    "fetch the commit into the mirror")
        entries = [line.split(None, 3) for line in listed.stdout.splitlines()]
        blobs = {e[2]: e[3] for e in entries if len(e) == 4 and e[1] == "blob"}
        checked = subprocess.run(["git", "--git-dir", git_dir, "cat-file", "--batch-check"],
                                 input="\n".join(blobs) + "\n", capture_output=True, text=True,
                                 timeout=300)
        missing = [line.split()[0] for line in checked.stdout.splitlines()
                   if line.endswith(" missing")]
        if missing:
            raise RepoNotFoundError(
                f"{where} lacks blob {missing[0]} ({blobs.get(missing[0], '?')}) of {commit}'s "
                f"tree{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}: fetch the "
                "full history of that commit into the mirror")

    def read_file(self, repo: str, commit: str, path: str) -> str | None:
        """A file of ``repo`` at ``commit`` read from the mirror without cloning (``git show``),
        or None when the mirror has no such file (or the source is a bundle or a URL)."""
        try:
            source = self.locate(repo)
        except RepoNotFoundError:
            return None
        if source.endswith(".bundle") or "://" in source:
            return None
        out = subprocess.run(["git", "--git-dir", _git_dir(source), "show", f"{commit}:{path}"],
                             capture_output=True, timeout=60)
        return out.stdout.decode("utf-8", "replace") if out.returncode == 0 else None


def _git_dir(source: str) -> str:
    """The git directory of a bare or working repository."""
    dot_git = Path(source) / ".git"
    return str(dot_git) if dot_git.exists() else source
