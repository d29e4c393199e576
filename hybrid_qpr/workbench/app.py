"""The workbench's HTTP layer (Starlette, an ASGI app uvicorn serves): routes onto
``hybrid_qpr.workbench.service.Workbench``, JSON errors, the optional API key and the page,
behind ``hybrid_qpr.workbench.guard.RequestGuard`` (Host check, same-origin JSON writes with
the run's token).

Every answer under ``/api/`` is JSON; an error is ``{"error": message, "status": code}`` with
the status in the response too, and never a traceback (unexpected errors are logged on the
server and answered with a 500 that says so). Searches run in Starlette's thread pool, so a
slow request never blocks the event loop and requests run concurrently. A body is read as it
streams in and refused (413) as soon as it passes ``MAX_BODY_BYTES``, declared or chunked.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from importlib import resources
from typing import Any

from hybrid_qpr.errors import BackendError, ConfigError, HybridQPRError, IndexLockedError, InputError
from hybrid_qpr.workbench.guard import TOKEN_HEADER, RequestGuard, new_token
from hybrid_qpr.workbench.judgments import JudgmentStoreError
from hybrid_qpr.workbench.openapi import openapi_spec
from hybrid_qpr.workbench.service import (COMPARE_MODES, COMPARE_OWN, RequestError, Workbench, parse_filters,
                                         parse_options)

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024  # a judgment is a few hundred bytes
# The page loads only its own files: no CDN, nothing from elsewhere (it works offline).
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def static_dir():
    """The page's files, shipped in the package (``hybrid_qpr/workbench/static``)."""
    return resources.files("hybrid_qpr.workbench") / "static"


def status_of(exc: Exception) -> int:
    """The HTTP status of an error raised while answering."""
    if isinstance(exc, (RequestError, JudgmentStoreError)):
        return exc.status
    if isinstance(exc, IndexLockedError):
        return 409
    if isinstance(exc, BackendError):
        return 502
    if isinstance(exc, ConfigError):  # a setting the backend refused (unknown filter field, too deep a page)
        return 422
    if isinstance(exc, InputError):
        return 400
    return 500


def create_app(workbench: Workbench, *, api_key: str | None = None, bound_host: str = "127.0.0.1",
               allowed_hosts: tuple[str, ...] = (), token: str | None = None):
    """The ASGI app serving ``workbench``; with ``api_key`` every ``/api/`` route except
    ``openapi.json`` needs it (header ``X-API-Key`` or ``Authorization: Bearer``). ``bound_host``
    (the address uvicorn listens on) and ``allowed_hosts`` are the names the Host check accepts
    besides loopback; ``token`` (default: a fresh random one) is what writes must carry."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from hybrid_qpr.workbench import relevance

    spec = openapi_spec(workbench.limits, tuple(workbench.list_names[len(COMPARE_MODES):]))
    spec["paths"].update(relevance.openapi_paths())
    token = token or new_token()

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message, "status": status}, status_code=status)

    def check_key(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if given is None and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if given is None or not hmac.compare_digest(given.encode(), api_key.encode()):
            raise RequestError(401, "this workbench needs an API key: send it as the header X-API-Key")

    async def json_body(request: Request, *, required: bool) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise RequestError(413, f"the body is {int(declared):,} bytes; at most {MAX_BODY_BYTES:,} are accepted")
        raw = bytearray()
        async for chunk in request.stream():  # never more than the limit in memory, whatever the sender does
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                raise RequestError(413, f"the body is over {MAX_BODY_BYTES:,} bytes; at most {MAX_BODY_BYTES:,} are accepted")
        if not raw.strip():
            if required:
                raise RequestError(400, "the body is empty: send a JSON object")
            return {}
        try:
            return json.loads(raw)
        except RecursionError:
            raise RequestError(400, "the body is not valid JSON (nested too deeply)") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"the body is not valid JSON ({str(exc)[:200]})") from None

    def api(handler):
        """Wrap ``handler(request)`` (async, returning a dict): key check, JSON answer, errors."""
        async def endpoint(request: Request) -> Response:
            try:
                check_key(request)
                return JSONResponse(await handler(request))
            except HybridQPRError as exc:
                status = status_of(exc)
                if status == 500:
                    logger.error("%s %s failed: %s", request.method, request.url.path, exc)
                return error(status, str(exc) if status != 500 else f"internal error: {exc}")
            except Exception:  # never a traceback in the answer; it goes to the server log
                logger.exception("%s %s failed", request.method, request.url.path)
                return error(500, "internal error; the server log has the details")
        return endpoint

    def search_args(request: Request, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
        params = request.query_params
        return {"filters": parse_filters(params.getlist("filter")), **parse_options(params, leave_out=leave_out)}

    async def health(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(workbench.health)

    async def search(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(workbench.search, request.query_params.get("q"), **search_args(request))

    async def compare(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(workbench.compare, request.query_params.get("q"),
                                       **search_args(request, COMPARE_OWN))

    async def get_judgments(request: Request) -> dict[str, Any]:
        return await run_in_threadpool(workbench.judgments)

    async def post_judgment(request: Request) -> dict[str, Any]:
        body = await json_body(request, required=True)
        return await run_in_threadpool(workbench.judge, body)

    async def tune(request: Request) -> dict[str, Any]:
        body = await json_body(request, required=False)
        if not isinstance(body, dict) or set(body) - {"store"} or not isinstance(body.get("store", False), bool):
            raise RequestError(422, 'the body must be empty or {"store": true|false}')
        return await run_in_threadpool(workbench.tune, store=body.get("store"))

    async def session(request: Request) -> dict[str, Any]:  # readable by this server's own page only (guard.py)
        return {"token": token, "header": TOKEN_HEADER, "index_writes": workbench.index_writes}

    async def openapi(request: Request) -> Response:  # readable without the key: it holds nothing of the index
        return JSONResponse(spec)

    async def page(request: Request) -> Response:
        return FileResponse(str(static_dir() / "index.html"), headers=PAGE_HEADERS)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        detail = {404: f"no such page or API route: {request.url.path} (the API is described at /api/openapi.json)",
                  405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error(exc.status_code, detail)

    async def unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error(500, "internal error; the server log has the details")

    routes = [
        Route("/", page),
        Route("/api/health", api(health)),
        Route("/api/session", api(session)),
        Route("/api/search", api(search)),
        Route("/api/compare", api(compare)),
        Route("/api/judgments", api(get_judgments), methods=["GET"]),
        Route("/api/judgments", api(post_judgment), methods=["POST"]),
        Route("/api/tune", api(tune), methods=["POST"]),
        Route("/api/openapi.json", openapi),
        *relevance.routes(workbench, api, json_body),
        Mount("/static", StaticFiles(directory=str(static_dir())), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: unexpected})
    return RequestGuard(app, token=token, bound_host=bound_host, allowed_hosts=allowed_hosts)



class BackgroundServer:
    """``app`` served by uvicorn on a thread of this process (tests, the screenshot script and
    the load benchmark); ``port=0`` takes a free port. Use as a context manager; ``url`` is
    the address it answers on."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="workbench-server", daemon=True)
        self.url = ""

    def __enter__(self) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the workbench server did not start (see the log above)")
            time.sleep(0.02)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
