"""A fault-injecting HTTP proxy in front of a real OpenSearch or Elasticsearch node: point a
client (ours or an application's) at ``FaultProxy(node_url).url`` to see what it does when a busy
or flaky cluster rejects, drops, withholds or cuts answers. The cluster fault tests and
``benchmarks/bench_faults.py`` use it.

It forwards every request to the node and answers with the node's answer, except that it
injects, on ``_bulk`` requests and with the shares given in ``Faults``, the failures a busy or
flaky cluster produces:

* ``reject_request`` - the whole request answered 429 ``es_rejected_execution_exception``
  (optionally with ``Retry-After``) and not forwarded: nothing applied;
* ``drop_item`` - an item removed from the forwarded request and answered 429 in its place in
  the ``items`` list: that document is not applied;
* ``applied_item_429`` - an item forwarded and applied, but its answer rewritten to 429: the
  client cannot tell it from a dropped one;
* ``timeout_after_apply`` - the request forwarded and applied, then no answer until the client
  gives up (or ``hold_seconds``): a timeout after the fact;
* ``reset_mid_response`` - the request forwarded and applied, then half the answer sent and the
  connection reset (TCP RST);
* ``refuse_after`` - after that many ``_bulk`` requests, every further one answered 403
  ``security_exception`` and not forwarded: a node that starts refusing writes mid-ingest (a
  failure no retry can fix);
* ``withhold_create`` - the request that creates an index (``PUT /<name>``) forwarded and applied,
  then no answer until the client gives up: an index made without the client knowing it.

Choices come from one seeded ``random.Random``, so a run is repeatable. ``counts`` says how
many of each were injected (and how many documents each touched). Loopback only; one thread
per client connection (``ThreadingHTTPServer``), HTTP/1.1 keep-alive.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

REJECTED = {"type": "es_rejected_execution_exception",
            "reason": "rejected execution of coordinating operation (injected by hybrid_qpr.testing.faultproxy)"}
REFUSED = {"type": "security_exception",
           "reason": "action [indices:data/write/bulk] is unauthorized (injected by hybrid_qpr.testing.faultproxy)"}
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host",
               "accept-encoding", "proxy-connection", "te", "upgrade"}


@dataclass(frozen=True)
class Faults:
    """What the proxy injects: each share is the chance (0..1) per ``_bulk`` request or item."""

    reject_request: float = 0.0
    retry_after: int | None = None  # seconds, sent with every rejected request when set
    drop_item: float = 0.0
    applied_item_429: float = 0.0
    timeout_after_apply: float = 0.0
    reset_mid_response: float = 0.0
    hold_seconds: float = 30.0  # longest a withheld answer is held
    refuse_after: int | None = None  # _bulk requests let through before every further one is refused (403)
    withhold_create: bool = False
    seed: int = 0


class FaultProxy:
    """``with FaultProxy("http://127.0.0.1:9200", Faults(reject_request=0.3)) as proxy: ... proxy.url``"""

    def __init__(self, upstream: str, faults: Faults):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.product_header: str | None = None  # Elasticsearch's X-Elastic-Product, copied onto made-up answers
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def chance(self, share: float) -> bool:
        with self.lock:
            return share > 0 and self.rng.random() < share

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def __enter__(self) -> "FaultProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"
    upstream_conn: http.client.HTTPConnection | None = None

    def log_message(self, format, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.handle_one()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_GET

    # ---- forwarding
    def forward(self, body: bytes, gzipped: bool) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        headers["Accept-Encoding"] = "identity"
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed meanwhile
            if self.upstream_conn is None:
                self.upstream_conn = http.client.HTTPConnection(*self.owner.upstream, timeout=120)
            try:
                self.upstream_conn.request(self.command, self.path, body=body or None, headers=headers)
                response = self.upstream_conn.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, OSError):
                self.upstream_conn.close()
                self.upstream_conn = None
                if attempt == 2:
                    raise
        answer_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_HEADERS]
        for k, v in answer_headers:
            if k.lower() == "x-elastic-product":
                self.owner.product_header = v
        return response.status, answer_headers, data

    def send(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def json_headers(self) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/json; charset=UTF-8")]
        if self.owner.product_header:
            headers.append(("X-Elastic-Product", self.owner.product_header))
        return headers

    def handle_one(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        gzipped = self.headers.get("Content-Encoding", "").lower() == "gzip"
        path = urlsplit(self.path).path
        if self.command == "POST" and path.endswith("/_bulk"):
            self.bulk(gzip.decompress(body) if gzipped else body)
        elif self.command == "PUT" and path.count("/") == 1 and self.owner.faults.withhold_create:
            self.forward(body, gzipped)
            self.owner.count("withheld_creations")
            self.withhold()
        else:
            self.send(*self.forward(body, gzipped))

    # ---- _bulk with faults
    def bulk(self, body: bytes) -> None:
        owner, faults = self.owner, self.owner.faults
        lines = body.decode("utf-8").splitlines()
        items: list[list[str]] = []  # each action's lines (header, and source unless a delete)
        i = 0
        while i < len(lines):
            if not lines[i].strip():
                i += 1
                continue
            op = next(iter(json.loads(lines[i])))
            n = 1 if op == "delete" else 2
            items.append(lines[i:i + n])
            i += n
        owner.count("bulk_requests")
        if faults.refuse_after is not None and owner.counts["bulk_requests"] > faults.refuse_after:
            owner.count("refused_requests")
            error = {"root_cause": [REFUSED], **REFUSED}
            self.send(403, self.json_headers(), json.dumps({"error": error, "status": 403}).encode())
            return
        if owner.chance(faults.reject_request):
            owner.count("rejected_requests")
            owner.count("rejected_request_docs", len(items))
            headers = self.json_headers()
            if faults.retry_after is not None:
                headers.append(("Retry-After", str(faults.retry_after)))
            error = {"root_cause": [REJECTED], **REJECTED}
            self.send(429, headers, json.dumps({"error": error, "status": 429}).encode())
            return
        dropped = [owner.chance(faults.drop_item) for _ in items]
        hidden = [not d and owner.chance(faults.applied_item_429) for d in dropped]
        owner.count("dropped_items", sum(dropped))
        kept = [item for item, d in zip(items, dropped) if not d]
        if kept:
            status, headers, data = self.forward("".join(line + "\n" for item in kept for line in item).encode(), False)
            if status != 200:
                self.send(status, headers, data)
                return
            answer = json.loads(data)
        else:
            headers, answer = self.json_headers(), {"took": 0, "items": []}
        upstream_items = iter(answer.get("items", []))
        out = []
        for item, was_dropped, was_hidden in zip(items, dropped, hidden):
            header = json.loads(item[0])
            op = next(iter(header))
            if was_dropped:
                out.append({op: {"_id": header[op].get("_id"), "status": 429, "error": REJECTED}})
                continue
            entry = next(upstream_items)
            result = entry[next(iter(entry))]
            if was_hidden and 200 <= int(result.get("status", 0)) < 300:
                owner.count("applied_items_answered_429")
                result = {"_id": result.get("_id"), "status": 429, "error": REJECTED}
            out.append({op: result})
        answer["items"] = out
        answer["errors"] = any(next(iter(e.values())).get("status", 200) >= 300 for e in out)
        data = json.dumps(answer).encode()
        if kept and owner.chance(faults.timeout_after_apply):
            owner.count("withheld_answers")
            self.withhold()
            return
        if kept and owner.chance(faults.reset_mid_response):
            owner.count("reset_answers")
            self.reset_after(headers, data)
            return
        self.send(200, headers, data)

    def withhold(self) -> None:
        """Say nothing until the client closes the connection (its timeout) or hold_seconds pass."""
        self.connection.settimeout(self.owner.faults.hold_seconds)
        try:
            while self.connection.recv(65536):
                pass
        except OSError:
            pass
        self.close_connection = True

    def reset_after(self, headers: list[tuple[str, str]], data: bytes) -> None:
        """Send the status line, the headers and half the body, then reset the connection."""
        self.send_response(200)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2])
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
