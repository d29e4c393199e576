"""What every request to the workbench passes before any route: the defences against other
web pages in the user's browser (an ASGI middleware around the app, so no route, page or
static file can be left out).

* **Host** (every request): the name in the ``Host`` header must be a loopback name
  (``localhost``, ``127.0.0.1``, ``::1``), the address ``serve`` is bound to, or a name given
  with ``--allowed-host``; when bound to every address (``0.0.0.0``, ``::``) any IP address is
  accepted too. A DNS-rebinding page reaches the server under its own host name, so it is
  answered 421 and can read nothing, not even the page.
* **Writes** (every method but GET, HEAD and OPTIONS):

  - a browser's cross-origin request is refused with 403: an ``Origin`` that is not this
    server's own, or ``Sec-Fetch-Site`` other than ``same-origin``/``none``;
  - the body must be declared ``application/json`` (415 otherwise), which no HTML form and no
    "simple" cross-origin ``fetch`` can send without a CORS preflight this server never grants;
  - the header ``X-Workbench-Token`` must carry this run's random token (403 otherwise). The
    page reads it from ``GET /api/session``, which only a same-origin page can read.

A refusal is the API's JSON error, ``{"error": message, "status": code}``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

TOKEN_HEADER = "X-Workbench-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})


def new_token() -> str:
    """A fresh random token for one run of the server."""
    return secrets.token_urlsafe(32)


def host_name(host: str) -> str:
    """The name part of a ``Host`` header value (or of a bind address), lowercased, without the
    port, IPv6 brackets or a trailing dot: ``[::1]:8765`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class RequestGuard:
    """The ASGI middleware of the module docstring around ``app``."""

    def __init__(self, app, *, token: str, bound_host: str = "127.0.0.1", allowed_hosts: Iterable[str] = ()):
        self.app = app
        self.token = token
        self.bound_host = host_name(bound_host)
        self.allowed = {*LOOPBACK_NAMES, self.bound_host, *(host_name(h) for h in allowed_hosts)} - {""}

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.host_problem(headers)
        if refusal is None and scope["method"].upper() not in SAFE_METHODS:
            refusal = self.write_problem(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        body = json.dumps({"error": message, "status": status}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    def host_allowed(self, name: str) -> bool:
        if name in self.allowed:
            return True
        return self.bound_host in WILDCARD_ADDRESSES and is_ip_address(name)

    def host_problem(self, headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host")
        if not host:
            return 421, "the request has no Host header; this workbench answers only requests that name it"
        name = host_name(host)
        if self.host_allowed(name):
            return None
        return 421, (f"Host {host[:100]!r} is not a name of this workbench (it answers to "
                     f"{', '.join(sorted(self.allowed))}); to reach it under that name, start serve with "
                     f"--allowed-host {name[:100]}")

    def write_problem(self, scope: dict[str, Any], headers: dict[str, str]) -> tuple[int, str] | None:
        origin = headers.get("origin")
        if origin is not None and not self.same_origin(origin, scope, headers["host"]):
            return 403, (f"cross-origin write refused: Origin {origin[:100]!r} is not this workbench; "
                         "only its own page may change judgments or the index")
        fetch_site = headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site.lower() not in SAME_SITE_FETCHES:
            return 403, f"cross-origin write refused (Sec-Fetch-Site: {fetch_site[:40]}); only the workbench's own page may write"
        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            return 415, (f"a write must send its body as Content-Type: application/json (got "
                         f"{media_type[:60] or 'none'!r})")
        given = headers.get(TOKEN_HEADER.lower())
        if given is None:
            return 403, (f"a write needs the header {TOKEN_HEADER} with this run's token (the page reads it "
                         "from GET /api/session)")
        if not hmac.compare_digest(given.encode("latin-1"), self.token.encode()):
            return 403, f"wrong {TOKEN_HEADER}: the token changes each time serve starts; read it again from GET /api/session"
        return None

    @staticmethod
    def same_origin(origin: str, scope: dict[str, Any], host: str) -> bool:
        """``origin`` is this server as the request reached it (scheme, host and port)."""
        try:
            parts = urlsplit(origin.strip().lower())
            port = parts.port
        except ValueError:
            return False
        scheme = scope.get("scheme", "http")
        default = 443 if scheme == "https" else 80
        if parts.scheme != scheme or not parts.hostname:
            return False
        own = urlsplit(f"{scheme}://{host.strip().lower()}")
        try:
            own_port = own.port
        except ValueError:
            return False
        return parts.hostname == own.hostname and (port or default) == (own_port or default)
