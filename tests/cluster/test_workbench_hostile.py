"""The workbench (``hybrid-qpr serve``, a real CLI process on a free port) under hostile input:
the requests another web page can make through the user's browser (a form post, a text/plain
fetch, a DNS-rebinding Host, a cross-origin Origin, no or a wrong token), bodies over the limit
(declared and chunked), malformed JSON and values, ids that would tear the judgment files, a
judgment file with an unreadable line and temporary files left by a killed writer."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from pathlib import Path

import pytest

from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.testing.workbench import ServeProcess, call, examples_local_index, session_token
from hybrid_qpr.workbench.guard import TOKEN_HEADER
from hybrid_qpr.workbench.judgments import query_id

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

GOOD_QUERY_ID = query_id("seeded query")
# qrels as an older workbench wrote them after judging an id holding a TAB: 4 columns on line 3
SEEDED_QRELS = f"query-id\tcorpus-id\tscore\n{GOOD_QUERY_ID}\tamazon-email-0\t1\n{GOOD_QUERY_ID}\tbad\tid\t1\n"
LEFTOVERS = (".corpus.jsonl.k1ll3d.tmp", "qrels/.val.tsv.k1ll3d.tmp")


class Serve(ServeProcess):
    """The real serve process, plus raw requests with any Host, Origin and Content-Type."""

    def __init__(self, tmp: Path, *args: str):
        super().__init__(tmp / f"serve-{len(list(tmp.glob('serve-*.log')))}.log", *args)

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict]:
        """One raw request (any Host, Origin, Content-Type): ``(status, JSON answer or {"text": ...})``."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            text = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, {"text": text.decode("utf-8", "replace")}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, committed_encoder) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "idx"
    examples_local_index(path, committed_encoder)
    return path


@pytest.fixture(scope="module")
def server(index_dir, tmp_path_factory):
    """A read-only serve (the default) started on a judgments store holding an unreadable line
    and two temporary files of a killed writer; ``--allowed-host wb.example``."""
    tmp = tmp_path_factory.mktemp("hostile-serve")
    judgments = tmp / "judgments"
    (judgments / "qrels").mkdir(parents=True)
    (judgments / "qrels" / "val.tsv").write_text(SEEDED_QRELS, encoding="utf-8")
    (judgments / "queries.jsonl").write_text(json.dumps({"_id": GOOD_QUERY_ID, "text": "seeded query"}) + "\n"
                                             + '{"_id": "wb-lone", "text": "\\ud800"}\n', encoding="utf-8")
    (judgments / "corpus.jsonl").write_text(json.dumps({"_id": "amazon-email-0", "title": "", "text": "t"}) + "\n",
                                            encoding="utf-8")
    for name in LEFTOVERS:
        (judgments / name).write_text("half a write", encoding="utf-8")
    serve = Serve(tmp, "--index", str(index_dir), "--judgments", str(judgments), "--min-tune-queries", "1",
                  "--allowed-host", "wb.example")
    serve.judgments = judgments
    try:
        yield serve
    finally:
        serve.stop()


def manifest_bytes(index_dir: Path) -> dict[str, bytes]:
    """Every file of the index outside its judgments: what a tune's commit would change."""
    return {str(p.relative_to(index_dir)): p.read_bytes() for p in sorted(index_dir.rglob("*"))
            if p.is_file() and "judgments" not in p.parts and p.name != "write.lock"}


def json_headers(server: Serve, **extra: str) -> dict[str, str]:
    return {"Content-Type": "application/json", TOKEN_HEADER: session_token(server.url), **extra}


JUDGMENT = json.dumps({"query": "how do i reset my password", "id": "amazon-email-0", "relevance": 1})


# ---------------------------------------------------------------- the judgment files

def test_serve_starts_on_a_judgment_file_with_unreadable_lines_and_reports_them(server):
    status, answer = call(f"{server.url}/api/judgments")
    assert status == 200
    skipped = answer["skipped_lines"]
    assert any("qrels/val.tsv:3: found 4 columns, expected 3" in s for s in skipped), skipped
    assert any("queries.jsonl:2:" in s and "surrogate" in s for s in skipped), skipped
    assert answer["count"] == 1 and answer["queries"][0]["query"] == "seeded query"  # the readable line is kept
    assert call(f"{server.url}/api/health")[1]["judgment_lines_skipped"] == 2
    log = server.log.read_text()
    assert "judgments: skipped an unreadable line:" in log and "val.tsv:3" in log and "Traceback" not in log


def test_a_write_keeps_the_unreadable_file_whole_beside_the_store(server):
    status, stored = call(f"{server.url}/api/judgments", "POST", {"query": "seeded query", "id": "netflix-password-0",
                                                                 "relevance": 2})
    assert status == 200, stored
    _, answer = call(f"{server.url}/api/judgments")
    copies = answer["unreadable_copies"]
    assert {Path(c).name.split(".unreadable-")[0] for c in copies} == {"val.tsv", "queries.jsonl"}
    kept = next(server.judgments / c for c in copies if "val.tsv" in c)
    assert kept.read_text(encoding="utf-8") == SEEDED_QRELS  # nothing lost
    _, queries, qrels = load_beir(server.judgments, "val")  # what 'tune --beir' reads: whole again
    assert qrels[GOOD_QUERY_ID] == {"amazon-email-0": 1, "netflix-password-0": 2}


def test_leftover_temporary_files_are_removed_at_start(server):
    for name in LEFTOVERS:
        assert not (server.judgments / name).exists(), name
    assert "left by a write that never finished" in server.log.read_text()


@pytest.mark.parametrize("doc_id", ["bad\tid", "bad\nid", "bad\r\nid", "bad\x00id", "bad\x7fid"])
def test_judgments_refuse_ids_with_control_characters(server, doc_id):
    before = (server.judgments / "qrels" / "val.tsv").read_bytes()
    status, answer = call(f"{server.url}/api/judgments", "POST", {"query": "q", "id": doc_id, "relevance": 1})
    assert status == 400 and "control character" in answer["error"] and "\n" not in answer["error"], answer
    assert (server.judgments / "qrels" / "val.tsv").read_bytes() == before


# ---------------------------------------------------------------- other web pages

@pytest.mark.parametrize("case, method, path, body, headers, status, words", [
    ("form post", "POST", "/api/judgments", "query=x&id=amazon-email-0&relevance=1",
     {"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"),
    ("form post from another site", "POST", "/api/judgments", "query=x&id=amazon-email-0&relevance=1",
     {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}, 403, "cross-origin"),
    ("text/plain fetch", "POST", "/api/judgments", JUDGMENT, {"Content-Type": "text/plain;charset=UTF-8"}, 415,
     "application/json"),
    ("text/plain fetch from another site", "POST", "/api/tune", "",
     {"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403, "cross-origin"),
    ("no Content-Type", "POST", "/api/tune", "", {}, 415, "application/json"),
    ("JSON without the token", "POST", "/api/judgments", JUDGMENT, {"Content-Type": "application/json"}, 403,
     TOKEN_HEADER),
    ("JSON with a wrong token", "POST", "/api/judgments", JUDGMENT,
     {"Content-Type": "application/json", TOKEN_HEADER: "guessed"}, 403, "wrong"),
])
def test_writes_other_pages_can_make_are_refused(server, index_dir, case, method, path, body, headers, status, words):
    before = manifest_bytes(index_dir), (server.judgments / "qrels" / "val.tsv").read_bytes()
    got, answer = server.request(method, path, body, headers)
    assert got == status and words in answer["error"], (case, answer)
    assert (manifest_bytes(index_dir), (server.judgments / "qrels" / "val.tsv").read_bytes()) == before


@pytest.mark.parametrize("origin, fetch_site", [("http://evil.example", None), ("null", None),
                                                ("http://127.0.0.1:1", None), ("https://127.0.0.1", None),
                                                (None, "cross-site"), (None, "same-site")])
def test_cross_origin_writes_are_refused_even_with_the_token(server, origin, fetch_site):
    headers = json_headers(server)
    if origin:
        headers["Origin"] = origin
    if fetch_site:
        headers["Sec-Fetch-Site"] = fetch_site
    got, answer = server.request("POST", "/api/judgments", JUDGMENT, headers)
    assert got == 403 and "cross-origin write refused" in answer["error"], answer


def test_the_tune_that_once_rewrote_the_manifest_is_refused(server, index_dir):
    """POST /api/tune from another origin with an empty body used to commit fusion rrf, alpha 0."""
    before = manifest_bytes(index_dir)
    got, answer = server.request("POST", "/api/tune", "", {"Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert got == 403, answer
    got, answer = server.request("POST", "/api/tune", "", {"Origin": "http://evil.example",
                                                          **json_headers(server)})
    assert got == 403, answer
    assert manifest_bytes(index_dir) == before


@pytest.mark.parametrize("method, path", [("GET", "/"), ("GET", "/static/app.js"), ("GET", "/api/health"),
                                          ("GET", "/api/session"), ("GET", "/api/search?q=password"),
                                          ("GET", "/api/no-such-route"), ("POST", "/api/judgments")])
def test_a_rebinding_host_is_refused_on_every_route(server, method, path):
    headers = {"Host": f"evil.example:{server.port}", **(json_headers(server) if method == "POST" else {})}
    got, answer = server.request(method, path, JUDGMENT if method == "POST" else None, headers)
    assert got == 421 and "not a name of this workbench" in answer["error"] and "--allowed-host evil.example" in \
        answer["error"], answer


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "wb.example", "WB.example."])
def test_known_hosts_and_same_origin_writes_are_answered(server, host):
    headers = {"Host": f"{host}:{server.port}"}
    assert server.request("GET", "/", headers=headers)[0] == 200
    assert server.request("GET", "/api/health", headers=headers)[0] == 200
    write = {**headers, **json_headers(server), "Origin": f"http://{host}:{server.port}", "Sec-Fetch-Site": "same-origin"}
    got, answer = server.request("POST", "/api/judgments", JUDGMENT, write)
    assert got == 200 and answer["relevance"] == 1, answer


def test_tune_commits_nothing_without_allow_index_writes(server, index_dir, tmp_path):
    before = manifest_bytes(index_dir)
    _, session = call(f"{server.url}/api/session")
    assert session["index_writes"] is False and session["header"] == TOKEN_HEADER
    got, answer = call(f"{server.url}/api/tune", "POST", {"store": True})
    assert got == 403 and "--allow-index-writes" in answer["error"], answer
    got, answer = call(f"{server.url}/api/tune", "POST", {})
    assert got == 200 and answer["stored"] is False and answer["index_writes"] is False and answer["chosen"], answer
    assert manifest_bytes(index_dir) == before
    assert call(f"{server.url}/api/health")[1]["fusion_defaults"] == {}

    writer = Serve(tmp_path, "--index", str(index_dir), "--judgments", str(server.judgments), "--min-tune-queries",
                   "1", "--allow-index-writes")
    try:
        assert call(f"{writer.url}/api/session")[1]["index_writes"] is True
        got, answer = call(f"{writer.url}/api/tune", "POST", {})
        assert got == 200 and answer["stored"] is True, answer
        assert call(f"{writer.url}/api/health")[1]["fusion_defaults"] == answer["chosen"]
    finally:
        writer.stop()
    assert manifest_bytes(index_dir) != before


# ---------------------------------------------------------------- bodies and values

def test_a_declared_huge_body_is_refused_before_it_is_sent(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.putrequest("POST", "/api/judgments")
        for key, value in {**json_headers(server), "Content-Length": str(400 * 2**20)}.items():
            connection.putheader(key, value)
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413 and "at most 65,536" in json.loads(response.read())["error"]
    finally:
        connection.close()


def test_a_chunked_400_mb_body_is_cut_off_at_the_limit(server):
    """The server reads a chunked body only up to 64 KB, answers 413 and stops reading: its
    memory does not grow with what the client tries to send."""
    rss_before = server.rss_mb()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    head = "".join(f"{k}: {v}\r\n" for k, v in json_headers(server).items())
    sock.sendall(f"POST /api/judgments HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{head}"
                 "Transfer-Encoding: chunked\r\n\r\n".encode())
    answer = bytearray()

    def read() -> None:
        try:
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                data = sock.recv(65536)
                if not data:
                    return
                answer.extend(data)
        except OSError:
            return

    reader = threading.Thread(target=read)
    reader.start()
    chunk = b"%x\r\n" % 2**20 + b" " * 2**20 + b"\r\n"
    sent = 0
    sock.settimeout(5)
    try:
        while sent < 400 * 2**20 and reader.is_alive():
            sock.sendall(chunk)
            sent += 2**20
    except OSError:  # the server closed the connection, or stopped reading and the window filled
        pass
    reader.join(timeout=30)
    sock.close()
    rss_after = server.rss_mb()
    print(f"\nchunked body: sent {sent / 2**20:.0f} MiB before the server stopped it; "
          f"server RSS {rss_before:.0f} -> {rss_after:.0f} MiB")
    assert answer.startswith(b"HTTP/1.1 413"), bytes(answer[:200])
    assert b"at most 65,536" in answer
    assert sent < 100 * 2**20 and rss_after - rss_before < 50


DEEP = b'{"query": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"


@pytest.mark.parametrize("body, status, words", [
    (DEEP[:65_000], 400, "not valid JSON"),
    (b"[" * 60_000, 400, "nested too deeply"),
    (b'{"query": "\\ud800", "id": "amazon-email-0", "relevance": 1}', 400, "lone surrogate"),
    (b'{"query": "q", "id": "amazon\\udfff", "relevance": 1}', 400, "lone surrogate"),
    (b'{"query": "q", "id": "amazon-email-0", "relevance": 1.0}', 422, "relevance=1.0"),
    (b'{"query": "q", "id": "amazon-email-0", "relevance": 1e400}', 422, "relevance=inf"),
    (b'{"query": "q", "id": "amazon-email-0", "relevance": -1}', 422, "relevance=-1"),
    (b'{"query": "q", "id": "amazon-email-0", "relevance": ' + b"9" * 5000 + b"}", 400, "not valid JSON"),
    (b'{"query": "q", "id": "' + b"x" * 600 + b'", "relevance": 1}', 413, "at most 512"),
    (b'{"query": "q", "id": " amazon-email-0", "relevance": 1}', 400, "leading or trailing whitespace"),
    (b'{"query": "q", "id": null, "relevance": 1}', 422, "must be strings"),
    (b'\xff\xfe{}', 400, "not valid JSON"),
])
def test_malformed_judgments_are_one_line_errors(server, body, status, words):
    got, answer = server.request("POST", "/api/judgments", body, json_headers(server))
    assert got == status and words in answer["error"] and "\n" not in answer["error"], answer


@pytest.mark.parametrize("body, status, words", [
    (b'{"store": "yes"}', 422, "store"), (b'{"store": true, "extra": 1}', 422, "store"), (b"[]", 422, "store"),
    (b"[" * 60_000, 400, "nested too deeply"),
])
def test_malformed_tune_bodies_are_refused(server, body, status, words):
    got, answer = server.request("POST", "/api/tune", body, json_headers(server))
    assert got == status and words in answer["error"], answer


@pytest.mark.parametrize("params, status, words", [
    ({"q": "\ud800"}, 200, ""),  # a surrogate in a URL is %ED%A0%80: decoded as replacement characters
    ({"q": "x", "k": 10**30}, 422, "k=1000000000000000000000000000000"),
    ({"q": "x", "k": "1e3"}, 400, "must be an integer"),
    ({"q": "x", "offset": 10**6}, 422, "offset=1000000"),
    ({"q": "x", "alpha": "1e400"}, 422, "alpha=inf"),
    ({"q": "x", "alpha": "-0.1"}, 422, "alpha=-0.1"),
    ({"q": "x", "filter": [f"topic:v{i}" for i in range(65)]}, 422, "65 filter values"),
    ({"q": "x", "filter": [f"f{i}:v" for i in range(17)]}, 422, "17 filter fields"),
    ({"q": "x", "mode": "bm25\x00"}, 422, "mode="),
])
def test_search_values_are_bounded(server, params, status, words):
    query = urllib.parse.urlencode(params, doseq=True, errors="surrogatepass")
    got, answer = server.request("GET", f"/api/search?{query}")
    assert got == status and (not words or words in answer["error"]), answer
