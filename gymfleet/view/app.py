"""The viewer's web app (Starlette): the pages, their read-only JSON API, and a run's files.

Pages are one static shell (``static/index.html`` + ``view.js`` + ``view.css``, shipped in the
package, no build step) that renders the API's JSON with ``textContent`` only: no text from a
trajectory ever reaches the page as HTML. Every response carries a Content-Security-Policy that
allows the viewer's own script and nothing inline, so even a bug there would run nothing. Only GET
and HEAD are routed: the app cannot change a store.

=====================================  ================================================
``/``                                  runs
``/run/{run}``                         a run: reward per task over versions, in flight, learner
``/run/{run}/trajectories``            its trajectories, filtered, paged, following the run live
``/run/{run}/groups``                  its groups: samples side by side, rewards and advantages
``/run/{run}/group?id=G``              one group, each sample's turns in a column
``/run/{run}/trajectory?id=R``         one trajectory: turns, tokens, grader, artifacts
``/api/...``                           the same as JSON (``/api/runs/{run}/...``)
``/api/runs/{run}/file?root=&path=``   a file of the run's own folders (``folders.py``)
=====================================  ================================================
"""

from __future__ import annotations

import contextlib
import importlib.resources
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gymfleet.orchestrator import display_url, RunRow
from gymfleet.view import queries
from gymfleet.view.artifacts import artifacts_of
from gymfleet.view.errors import ArtifactRefusedError, NotFoundError, ViewError
from gymfleet.view.folders import RunFolders
from gymfleet.view.records import Cursor, TrajectoryFilters, to_json
from gymfleet.view.stores import StoreSet, describe_db_error
from gymfleet.view.tokens import RunTokenizer, TokenDecoder

STATIC = importlib.resources.files("gymfleet.view") / "static"
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
FILE_CSP = "default-src 'none'; img-src 'self'; sandbox"
PAGES = ("/", "/run/{run_id}", "/run/{run_id}/trajectories", "/run/{run_id}/groups", "/run/{run_id}/group",
         "/run/{run_id}/trajectory")
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


@dataclass
class Viewer:
    """What every request reads: the stores and the token decoder."""

    stores: StoreSet
    decoder: TokenDecoder


Handler = Callable[[Request], Awaitable[Response]]


def create_app(stores: StoreSet, decoder: TokenDecoder | None = None, *,
               allowed_hosts: list[str] | None = None) -> Starlette:
    """The viewer's ASGI app over ``stores``.

    Args:
        decoder: token text of a trajectory (default: the run's own tokenizer, :class:`RunTokenizer`).
        allowed_hosts: ``Host`` headers answered (DNS-rebinding guard); default the loopback names.
    """
    viewer = Viewer(stores, decoder or RunTokenizer())

    def api(fn: Callable[[Viewer, Request], Awaitable[Any]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                result = await fn(viewer, request)
            except NotFoundError as exc:
                return _error(404, str(exc))
            except ArtifactRefusedError as exc:
                return _error(403, str(exc))
            except (ViewError, ValidationError, ValueError) as exc:
                return _error(400, _one_line(exc))
            except DBAPIError as exc:
                return _error(503, f"the store did not answer: {describe_db_error(exc)}")
            return result if isinstance(result, Response) else JSONResponse(to_json(result))
        return endpoint

    routes = [Route(p, _page, methods=["GET"]) for p in PAGES] + [
        Route("/api/runs", api(_runs), methods=["GET"]),
        Route("/api/runs/{run_id}", api(_run), methods=["GET"]),
        Route("/api/runs/{run_id}/trajectories", api(_trajectories), methods=["GET"]),
        Route("/api/runs/{run_id}/groups", api(_groups), methods=["GET"]),
        Route("/api/runs/{run_id}/group", api(_group), methods=["GET"]),
        Route("/api/runs/{run_id}/trajectory", api(_trajectory), methods=["GET"]),
        Route("/api/runs/{run_id}/file", api(_file), methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders),
                  Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS)]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await stores.close()

    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


class _SecurityHeaders:
    """Adds the CSP, ``nosniff`` and no-referrer to every response (pages, API and files)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_file = scope["path"].endswith("/file")

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", (FILE_CSP if is_file else PAGE_CSP).encode()),
                            (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                            (b"cache-control", b"no-store")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
    return " ".join(str(exc).split())


async def _page(request: Request) -> Response:
    return FileResponse(str(STATIC / "index.html"), media_type="text/html; charset=utf-8")


async def _runs(viewer: Viewer, request: Request) -> Any:
    runs, errors = [], []
    for url in viewer.stores.urls():
        try:
            async with (await viewer.stores.engine(url)).connect() as conn:
                for r in await queries.list_runs(conn):
                    folders = RunFolders.of(r.run_id, viewer.stores.runs_dir, {}, None if viewer.stores.store is None else url)
                    n_steps, _ = folders.learner_steps(last=0)
                    report = folders.roots["report"]
                    runs.append({"store": display_url(url), **to_json(r), "learner_steps": n_steps,
                                 "report_dir": str(report) if report.is_dir() else None})
        except (DBAPIError, ViewError) as exc:  # one unreadable store does not hide the others
            errors.append(f"{display_url(url)}: {describe_db_error(exc)}")
    runs.sort(key=lambda r: r["created_at"], reverse=True)
    return {"runs": runs, "errors": errors}


async def _folders(viewer: Viewer, run_id: str, url: str, config: dict[str, Any]) -> RunFolders:
    return RunFolders.of(run_id, viewer.stores.runs_dir, config, None if viewer.stores.store is None else url)


async def _run(viewer: Viewer, request: Request) -> Any:
    run_id = request.path_params["run_id"]
    url, engine = await viewer.stores.engine_of(run_id)
    async with engine.connect() as conn:
        overview = await queries.run_overview(conn, run_id)
    folders = await _folders(viewer, run_id, url, overview.config)
    n_steps, steps = folders.learner_steps()
    return {**to_json(overview), "store": display_url(url), "learner_steps": n_steps, "steps": steps,
            "report": [to_json(f) for f in folders.report_files()], "report_dir": str(folders.roots["report"])}


def _filters(request: Request) -> TrajectoryFilters:
    q = request.query_params
    keys = ("task", "status", "min_reward", "max_reward", "version", "text")
    return TrajectoryFilters.model_validate({k: q[k] for k in keys if q.get(k, "") != ""})


def _cursor(request: Request, key: str) -> Cursor | None:
    token = request.query_params.get(key)
    return Cursor.decode(token) if token else None


def _limit(request: Request, default: int) -> int:
    raw = request.query_params.get("limit", str(default))
    if not raw.isdigit():
        raise ViewError(f"limit={raw!r}: give a whole number of rows")
    return int(raw)


async def _trajectories(viewer: Viewer, request: Request) -> Any:
    run_id = request.path_params["run_id"]
    _, engine = await viewer.stores.engine_of(run_id)
    limit = _limit(request, 50)
    async with engine.connect() as conn:
        rows = await queries.trajectory_page(conn, run_id, _filters(request), before=_cursor(request, "before"),
                                             after=_cursor(request, "after"), limit=limit)
    return {"rows": rows, "next": rows[-1].cursor if len(rows) == limit else None}


async def _groups(viewer: Viewer, request: Request) -> Any:
    run_id = request.path_params["run_id"]
    _, engine = await viewer.stores.engine_of(run_id)
    limit = _limit(request, 20)
    async with engine.connect() as conn:
        groups = await queries.groups_page(conn, run_id, task=request.query_params.get("task") or None,
                                           before=_cursor(request, "before"), limit=limit)
    return {"groups": groups, "next": groups[-1].cursor if len(groups) == limit else None}


async def _group(viewer: Viewer, request: Request) -> Any:
    run_id = request.path_params["run_id"]
    _, engine = await viewer.stores.engine_of(run_id)
    async with engine.connect() as conn:
        group, messages = await queries.group_detail(conn, run_id, request.query_params.get("id", ""))
    return {"group": group, "messages": messages}


async def _trajectory(viewer: Viewer, request: Request) -> Any:
    run_id = request.path_params["run_id"]
    url, engine = await viewer.stores.engine_of(run_id)
    async with engine.connect() as conn:
        detail = await queries.trajectory_detail(conn, run_id, request.query_params.get("id", ""))
        config = await _config(conn, run_id)
    pieces, why = await viewer.decoder.pieces(config, detail.token_ids)
    folders = await _folders(viewer, run_id, url, config)
    return {**to_json(detail), "pieces": pieces, "pieces_note": why,
            "artifacts": to_json(artifacts_of(detail.metrics, folders, detail.summary.created_at))}


async def _config(conn: Any, run_id: str) -> dict[str, Any]:
    return dict(await conn.scalar(select(RunRow.__table__.c.config).where(RunRow.__table__.c.run_id == run_id)) or {})


async def _file(viewer: Viewer, request: Request) -> Any:
    run_id = request.path_params["run_id"]
    url, engine = await viewer.stores.engine_of(run_id)
    async with engine.connect() as conn:
        config = await _config(conn, run_id)
    folders = await _folders(viewer, run_id, url, config)
    path, media = folders.resolve(request.query_params.get("root", ""), request.query_params.get("path", ""))
    return FileResponse(str(path), media_type=media, content_disposition_type="inline")
