"""The workbench's request guard without a server: which Host names it answers, which Origins
are its own, and what a write must carry (the HTTP-level cases run against a real serve in
tests/cluster/test_workbench_hostile.py)."""

from __future__ import annotations

import asyncio

import pytest

from hybrid_qpr.workbench.guard import TOKEN_HEADER, RequestGuard, host_name


@pytest.mark.parametrize("header, name", [("localhost:8765", "localhost"), ("[::1]:8765", "::1"), ("::1", "::1"),
                                          ("WB.Example.:80", "wb.example"), ("127.0.0.1", "127.0.0.1")])
def test_host_name(header, name):
    assert host_name(header) == name


@pytest.mark.parametrize("bound, allowed, host, answered", [
    ("127.0.0.1", (), "localhost:1", True),
    ("127.0.0.1", (), "[::1]:1", True),
    ("127.0.0.1", (), "192.168.1.5:8765", False),  # only a wildcard bind answers other addresses
    ("127.0.0.1", (), "evil.example:8765", False),
    ("127.0.0.1", (), "localhost.evil.example", False),
    ("127.0.0.1", ("wb.example",), "wb.example:8765", True),
    ("0.0.0.0", (), "192.168.1.5:8765", True),
    ("::", (), "[fe80::1]:8765", True),
    ("0.0.0.0", (), "rebind.example:8765", False),  # a rebinding page always carries a name
    ("10.0.0.7", (), "10.0.0.7:8765", True),
])
def test_host_check(bound, allowed, host, answered):
    guard = RequestGuard(None, token="t", bound_host=bound, allowed_hosts=allowed)
    assert (guard.host_problem({"host": host}) is None) is answered


def _scope(method: str, headers: dict[str, str]) -> dict:
    return {"type": "http", "method": method, "scheme": "http", "path": "/api/judgments",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}


def _answer(guard: RequestGuard, method: str, headers: dict[str, str]) -> int:
    """The status the guard answers, or 0 when it passes the request on to the app."""
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    asyncio.run(guard(_scope(method, headers), None, send))
    return sent[0]["status"] if sent else 0


@pytest.mark.parametrize("method, extra, status", [
    ("GET", {}, 0),
    ("POST", {"Content-Type": "application/json", TOKEN_HEADER: "s3cret"}, 0),
    ("POST", {"Content-Type": "application/json; charset=utf-8", TOKEN_HEADER: "s3cret",
              "Origin": "http://localhost:8765", "Sec-Fetch-Site": "same-origin"}, 0),
    ("POST", {"Content-Type": "application/json", TOKEN_HEADER: "s3cret", "Origin": "http://localhost:80"}, 403),
    ("PUT", {"Content-Type": "text/plain", TOKEN_HEADER: "s3cret"}, 415),
    ("DELETE", {"Content-Type": "application/json"}, 403),
    ("POST", {"Content-Type": "application/json", TOKEN_HEADER: "s3cre"}, 403),
])
def test_writes_need_same_origin_json_and_the_token(method, extra, status):
    async def app(scope, receive, send):
        pass

    guard = RequestGuard(app, token="s3cret")
    assert _answer(guard, method, {"Host": "localhost:8765", **extra}) == status
