"""The workbench on a real socket (served on a thread of this process): Host values a browser
never sends but a raw client can, the security headers of every answer, and judgment writes to
a store that is full or may not be written, while reads go on."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import stat
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from hybrid_qpr.testing.limits import file_size_limit, unprivileged
from hybrid_qpr.testing.workbench import call, examples_local_index, served, session_token
from hybrid_qpr.workbench.guard import TOKEN_HEADER

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

DOC = "amazon-email-0"


@pytest.fixture(scope="module")
def public_dir():
    """A directory every user may enter (a store written as uid nobody must be reachable)."""
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        path = Path(candidate).resolve()
        if path.is_dir() and all(p.stat().st_mode & 0o001 for p in [path, *path.parents]):
            base = Path(tempfile.mkdtemp(prefix="hqpr-wb-", dir=path))
            os.chmod(base, 0o755)
            yield base
            for p in [base, *base.rglob("*")]:
                with contextlib.suppress(OSError):
                    os.chmod(p, 0o755 if p.is_dir() else 0o644)
            shutil.rmtree(base)
            return
    raise AssertionError("no temporary directory that every user may enter")


@pytest.fixture(scope="module")
def server(public_dir, committed_encoder):
    index = examples_local_index(public_dir / "idx", committed_encoder)
    store = public_dir / "judgments"
    with served(index, committed_encoder, store, index=str(public_dir / "idx"), kind="local") as url:
        yield url, store
    index.close()


def raw(url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None):
    """One request with exactly these headers (http.client sends Host as given)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("host", ["[::1]evil.example:{port}", "127.0.0.1:{port}@evil.example", "localhost:{port}:{port}",
                                  "127.0.0.1:99999", "[::1", "[evil.example]:{port}", "localhost evil.example",
                                  "127.0.0.1:{port}/x", "localhost:{port}#"])
def test_a_host_value_that_is_not_exactly_a_name_and_port_is_refused(server, host):
    url, _ = server
    port = urllib.parse.urlsplit(url).port
    for path in ("/api/session", "/"):
        status, _, body = raw(url, "GET", path, {"Host": host.format(port=port)})
        assert status == 421, (host, status, body)
        assert b"token" not in body and b"cannot be read as a host name" in body, body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LOCALHOST.:{port}", "localhost"])
def test_the_hosts_a_browser_sends_are_answered(server, host):
    url, _ = server
    port = urllib.parse.urlsplit(url).port
    status, _, body = raw(url, "GET", "/api/session", {"Host": host.format(port=port)})
    assert status == 200 and "token" in json.loads(body)


def test_every_answer_carries_the_security_headers(server):
    url, _ = server
    host = {"Host": urllib.parse.urlsplit(url).netloc}
    answers = {"session": raw(url, "GET", "/api/session", host), "health": raw(url, "GET", "/api/health", host),
               "page": raw(url, "GET", "/", host), "unknown": raw(url, "GET", "/api/nope", host),
               "refused host": raw(url, "GET", "/api/session", {"Host": "evil.example"}),
               "refused write": raw(url, "POST", "/api/judgments", {**host, "Content-Type": "text/plain"}, b"x"),
               "openapi": raw(url, "GET", "/api/openapi.json", host)}
    for name, (status, headers, _) in answers.items():
        lowered = {k.lower(): v for k, v in headers.items()}
        assert lowered.get("x-content-type-options") == "nosniff", (name, status, headers)
        assert lowered.get("referrer-policy") == "no-referrer" and lowered.get("x-frame-options") == "DENY", name
        assert "content-security-policy" in lowered, name
        if name != "page":
            assert lowered["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'", name
    page_csp = {k.lower(): v for k, v in answers["page"][1].items()}["content-security-policy"]
    assert page_csp.startswith("default-src 'self'")  # the page keeps its own policy
    session = {k.lower(): v for k, v in answers["session"][1].items()}
    assert session["cache-control"] == "no-store"  # it holds the token


def files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def test_a_judgment_on_a_full_or_unwritable_store_says_why_and_reads_go_on(server):
    url, store = server
    api = url + "/api"
    assert call(f"{api}/judgments", "POST", {"query": "seeded", "id": DOC, "relevance": 1})[0] == 200
    before = files(store)
    token = session_token(url)
    judgment = {"query": "a longer query so that the files grow past the limit " * 4, "id": DOC, "relevance": 2}

    with file_size_limit(max(len(b) for b in before.values()) + 16):
        status, answer = call(f"{api}/judgments", "POST", judgment, headers={TOKEN_HEADER: token})
        read_status, read = call(f"{api}/judgments")
        search_status, _ = call(f"{api}/search?q=email&mode=bm25")
    assert status == 507, answer
    assert answer["error"].startswith("the judgment was not stored: writing ") and "file-size limit" in answer["error"]
    assert "the judgments stored before are unchanged" in answer["error"]
    assert read_status == 200 and read["count"] == 1 and search_status == 200
    assert files(store) == before  # no temporary file left, nothing changed

    for path in [store, *store.rglob("*")]:
        os.chmod(path, stat.S_IMODE(path.stat().st_mode) & ~0o222)  # read-only for everyone
    try:
        with unprivileged():
            status, answer = call(f"{api}/judgments", "POST", judgment, headers={TOKEN_HEADER: token})
            read_status, read = call(f"{api}/judgments")
    finally:
        for path in [store, *store.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert status == 503 and "permission denied" in answer["error"], answer
    assert read_status == 200 and read["count"] == 1
    assert files(store) == before
    assert call(f"{api}/judgments", "POST", judgment)[0] == 200  # writable again: stored
