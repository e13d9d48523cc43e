"""The HTTP app of ``gymfleet serve``: a TransformersEngine behind the vLLM API subset of VLLMEngine.

Routes (same shapes as vLLM's OpenAI-compatible server): ``POST /v1/completions`` (token-id
prompts, logprobs, tokens as ``"token_id:<id>"``), ``POST /v1/load_lora_adapter``,
``POST /v1/unload_lora_adapter``, ``GET /v1/models``, ``GET /health``. Errors come back as
``{"error": {"message", "type", "param", "code"}}`` with status 400 (bad request, too-long prompt,
adapter load failure) or 404 (unknown model/adapter).

Unlike vLLM, ``lora_path`` may also be an fsspec URL (``s3://bucket/run/v000003``,
``file:///shared/bucket/...``) when the app has an ``adapter_cache``: the replica copies the
adapter's files into it first (:func:`~gymfleet.orchestrator.engines.adapters.copy_adapter`), so a
replica on another machine loads straight from the bucket (``train --cluster``'s replica actors).
Loading a name that is already loaded succeeds without reloading: adapter names carry their
policy version (``<run>-v000003``), so the same name is the same weights (a restarted shard
loads again what its replica holds).

The admin routes (load, unload) change what every rollout samples from, so a web page must never
reach them (a browser task's page runs on the same host). ``gymfleet serve`` therefore serves
them apart: :func:`build_app` with ``admin=False`` on the TCP port (no admin route there: 404) and
:func:`build_admin_app` on a unix-domain socket that no page can open
(:mod:`~gymfleet.orchestrator.engines.listeners`). Wherever they are served, they refuse any
request a browser made (one carrying an ``Origin`` or ``Sec-Fetch-*`` header: browsers set these,
and page scripts cannot remove them) with 403, and, when the app has an ``admin_token``, any
request without ``Authorization: Bearer <admin_token>`` with 401. ``gymfleet serve`` always sets
one (``--admin-token-file``, a 0600 file no page can read).
"""

from __future__ import annotations

import asyncio
import hmac
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.adapters import copy_adapter
from gymfleet.orchestrator.engines.errors import AdapterError, ContextLengthError, UnknownAdapterError
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine
from gymfleet.orchestrator.engines.vllm import SESSION_HEADER, TOKEN_ID_PREFIX


class CompletionRequest(BaseModel):
    """The subset of vLLM's completion request that gymfleet serve honours."""

    model: str
    prompt: list[int] = Field(min_length=1)
    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: list[str] | str | None = None
    logprobs: int | None = None
    return_tokens_as_token_ids: bool = False
    include_stop_str_in_output: bool = False


class LoadLoRARequest(BaseModel):
    """Body of ``POST /v1/load_lora_adapter``."""

    lora_name: str
    lora_path: str


class UnloadLoRARequest(BaseModel):
    """Body of ``POST /v1/unload_lora_adapter``."""

    lora_name: str


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    """A vLLM-shaped error body."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status)


BROWSER_HEADERS = ("origin", "sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest")
"""Headers a browser adds to every request of a page (and a page cannot take off)."""


def admin_refusal(request: Request, admin_token: str | None) -> Response | None:
    """Why an admin request (load/unload) is refused, as its response; None when it may go.

    403 when a browser sent it (:data:`BROWSER_HEADERS`), 401 when ``admin_token`` is set and the
    request does not carry ``Authorization: Bearer <admin_token>`` (compared in constant time).
    """
    if any(h in request.headers for h in BROWSER_HEADERS):
        return error_response(403, "admin routes refuse requests made by a web page", "PermissionDeniedError")
    if admin_token is not None:
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), admin_token.encode()):
            return error_response(401, "admin routes need Authorization: Bearer <admin token> "
                                  "(gymfleet serve --admin-token-file)", "AuthenticationError")
    return None


def build_app(engine: TransformersEngine, served_model_name: str, adapter_cache: Path | None = None,
              admin_token: str | None = None, admin: bool = True) -> Starlette:
    """The ASGI app serving ``engine`` under the base model name ``served_model_name``.

    Args:
        adapter_cache: a local folder where adapters given as fsspec URLs are copied before they
            load (and removed when unloaded); None: ``lora_path`` must be a path this machine
            reads (as with vLLM).
        admin_token: the bearer token load/unload requests must carry; None: no token (requests
            from web pages are refused all the same).
        admin: serve the admin routes (load/unload) here too; ``gymfleet serve`` passes False and
            serves them on its admin socket (:func:`build_admin_app`).
    """
    routes = _inference_routes(engine, served_model_name)
    if admin:
        routes += _admin_routes(engine, adapter_cache, admin_token)
    return Starlette(routes=routes, exception_handlers={Exception: _internal_error})


def build_admin_app(engine: TransformersEngine, adapter_cache: Path | None = None,
                    admin_token: str | None = None) -> Starlette:
    """The admin routes alone (``POST /v1/load_lora_adapter``, ``/v1/unload_lora_adapter``) plus
    ``GET /health``, for the replica's admin listener; arguments as in :func:`build_app`."""
    async def health(request: Request) -> Response:
        return Response(status_code=200 if await engine.health() else 503)

    routes = [*_admin_routes(engine, adapter_cache, admin_token), Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={Exception: _internal_error})


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(500, f"replica failed: {exc!r}", "InternalServerError")


def _inference_routes(engine: TransformersEngine, served_model_name: str) -> list[Route]:
    async def completions(request: Request) -> Response:
        try:
            body = CompletionRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            return error_response(400, f"invalid completion request: {exc}", "BadRequestError")
        adapter = None if body.model == served_model_name else body.model
        if adapter is not None and adapter not in engine.adapters:
            return error_response(404, f"The model `{body.model}` does not exist.", "NotFoundError")
        stop = [body.stop] if isinstance(body.stop, str) else (body.stop or [])
        sampling = SamplingParams(
            temperature=body.temperature, top_p=body.top_p, max_new_tokens=body.max_tokens, stop=stop, seed=body.seed
        )
        try:
            generation = await engine.generate(body.prompt, sampling, adapter, request.headers.get(SESSION_HEADER))
        except ContextLengthError as exc:
            return error_response(400, str(exc), "BadRequestError")
        except UnknownAdapterError as exc:
            return error_response(404, str(exc), "NotFoundError")
        return JSONResponse(_completion_body(engine, body, generation))

    async def models(request: Request) -> Response:
        names = [served_model_name, *engine.adapters]
        data = [{"id": n, "object": "model", "owned_by": "gymfleet", "parent": None if n == served_model_name else served_model_name} for n in names]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> Response:
        return Response(status_code=200 if await engine.health() else 503)

    return [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]


def _admin_routes(engine: TransformersEngine, adapter_cache: Path | None, admin_token: str | None) -> list[Route]:
    copies: dict[str, Path] = {}

    async def load_lora_adapter(request: Request) -> Response:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        try:
            body = LoadLoRARequest.model_validate(await request.json())
            if body.lora_name in engine.adapters:  # names carry their version: the same weights
                return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' is already loaded.")
            path = body.lora_path
            if adapter_cache is not None and "://" in path:
                try:
                    path = await asyncio.to_thread(copy_adapter, path, str(adapter_cache), body.lora_name)
                except OSError as exc:
                    raise AdapterError(f"copying adapter {body.lora_name!r} from {path} failed: {exc}") from exc
                copies[body.lora_name] = Path(path)
            try:
                await engine.load_adapter(body.lora_name, path)
            except AdapterError:
                if body.lora_name in copies:  # a copy that did not load is not kept
                    await asyncio.to_thread(shutil.rmtree, copies.pop(body.lora_name), True)
                raise
        except (ValidationError, ValueError, AdapterError) as exc:
            return error_response(400, str(exc), "BadRequestError")
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    async def unload_lora_adapter(request: Request) -> Response:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        try:
            body = UnloadLoRARequest.model_validate(await request.json())
            await engine.unload_adapter(body.lora_name)
            if body.lora_name in copies:  # the cache holds only what is loaded
                await asyncio.to_thread(shutil.rmtree, copies.pop(body.lora_name), True)
        except (ValidationError, ValueError) as exc:
            return error_response(400, str(exc), "BadRequestError")
        except UnknownAdapterError as exc:
            return error_response(404, str(exc), "NotFoundError")
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    return [
        Route("/v1/load_lora_adapter", load_lora_adapter, methods=["POST"]),
        Route("/v1/unload_lora_adapter", unload_lora_adapter, methods=["POST"]),
    ]


def _completion_body(engine: TransformersEngine, body: CompletionRequest, generation: Any) -> dict[str, Any]:
    tokenizer = engine.tokenizer
    if body.return_tokens_as_token_ids:
        tokens = [f"{TOKEN_ID_PREFIX}{t}" for t in generation.token_ids]
    else:
        tokens = [tokenizer.decode([t]) for t in generation.token_ids]
    logprobs = None
    if body.logprobs is not None:
        top = [{tok: lp} for tok, lp in zip(tokens, generation.logprobs)]
        logprobs = {"text_offset": None, "token_logprobs": generation.logprobs, "tokens": tokens, "top_logprobs": top}
    n_out = len(generation.token_ids)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.model,
        "choices": [{
            "index": 0,
            "text": tokenizer.decode(generation.token_ids, skip_special_tokens=True),
            "logprobs": logprobs,
            "finish_reason": generation.finish_reason,
            "stop_reason": None,
        }],
        "usage": {
            "prompt_tokens": generation.n_prompt_tokens,
            "completion_tokens": n_out,
            "total_tokens": generation.n_prompt_tokens + n_out,
            "prompt_tokens_details": {"cached_tokens": generation.n_cached_tokens},
        },
    }
