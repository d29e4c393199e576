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

The ``Host`` header is parsed strictly (RFC 9110: a name or IPv4 address, or an IPv6 address in
brackets, then at most ``:port``); anything else (``[::1]evil.example``, ``127.0.0.1:80@evil``)
is refused, never cut down to a name that passes. Every answer, a refusal included, carries
``SECURITY_HEADERS`` (``nosniff``, no referrer, no framing, same-origin resources) and, unless
it sets its own (the page does), a Content-Security-Policy that allows nothing; an ``/api/``
answer is never cached (``/api/session`` holds the token).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

TOKEN_HEADER = "X-Workbench-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})
# a reg-name or IPv4 address (letters, digits, '-', '_', dots; a trailing dot allowed) or a
# bracketed IPv6 address, then an optional port: nothing else may follow
_HOST_HEADER = re.compile(r"(?:\[(?P<ipv6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?\.?))"
                          r"(?::(?P<port>[0-9]{1,5}))?")
SECURITY_HEADERS = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "x-frame-options": "DENY",
                    "cross-origin-resource-policy": "same-origin", "cross-origin-opener-policy": "same-origin"}
API_CSP = "default-src 'none'; frame-ancestors 'none'"


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


def host_header_name(host: str) -> str | None:
    """The name a ``Host`` header value names (as ``host_name`` gives it), or ``None`` when the
    value is not exactly ``name[:port]``, ``IPv4[:port]`` or ``[IPv6][:port]``."""
    found = _HOST_HEADER.fullmatch(host.strip().lower())
    if found is None or (found["port"] is not None and int(found["port"]) > 65535):
        return None
    if found["ipv6"] is not None:
        try:
            ipaddress.IPv6Address(found["ipv6"])
        except ValueError:
            return None
        return found["ipv6"]
    return found["name"].rstrip(".")


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
        send = _with_security_headers(send, api=scope.get("path", "").startswith("/api/"))
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
        name = host_header_name(host)
        if name is None:
            return 421, (f"Host {host[:100]!r} cannot be read as a host name with an optional port; this workbench "
                         "answers only requests that name it")
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


def _with_security_headers(send, *, api: bool):
    """``send`` adding ``SECURITY_HEADERS`` (and the CSP and cache rule of the module docstring)
    to the answer's start, leaving any the answer set itself."""
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {k.decode("latin-1").lower() for k, _ in headers}
            extra = {**SECURITY_HEADERS, "content-security-policy": API_CSP}
            if api:
                extra["cache-control"] = "no-store"
            headers += [(k.encode(), v.encode()) for k, v in extra.items() if k not in present]
            message = {**message, "headers": headers}
        await send(message)
    return sending
