"""Load benchmark of the workbench API: N concurrent clients for S seconds against
``hybrid-qpr serve`` over an embedded index, per endpoint.

The server is the real CLI in its own process (``hybrid-qpr serve --index DIR``), so the
clients (threads of this process, one keep-alive connection each) do not share its
interpreter. Each client sends requests back to back, each with a query drawn (seeded) from
the indexed questions, and counts an error for any answer that is not 200 or any failed
connection. Reported per endpoint: requests, requests/s, p50/p95/p99/max latency in ms,
errors.

Endpoints (``--endpoints``): ``search`` (``/api/search?mode=hybrid&k=10``, what a client
application asks) and ``compare`` (``/api/compare?k=10``, the page's request: bm25, knn,
hybrid and rerank lists).

Usage (build the index once with 'hybrid-qpr ingest'; timings depend on the machine, say if
it was loaded):
    hybrid-qpr ingest /work/shared/data/quora-pairs.tsv.gz --index /tmp/quora-idx
    nice -n 10 python benchmarks/bench_workbench.py --index /tmp/quora-idx \
        --pairs /work/shared/data/quora-pairs.tsv.gz --out benchmarks/results/workbench-quora.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

from _common import command_line, repo_relative
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.errors import BadLines

PATHS = {"search": "/api/search?mode=hybrid&k=10&q=", "compare": "/api/compare?k=10&q="}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(index: Path, port: int, judgments: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "hybrid_qpr.cli.main", "serve", "--index", str(index), "--port",
                             str(port), "--judgments", str(judgments)])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench_workbench: the server exited with {proc.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/api/health")
            if connection.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("bench_workbench: the server did not answer /api/health within 300 s")


def run_clients(port: int, path: str, queries: list[str], clients: int, seconds: float, seed: int) -> dict:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    samples: list[str] = []
    stop_at = time.monotonic() + seconds

    def client(i: int) -> None:
        rng = random.Random(seed + i)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < stop_at:
            url = path + urllib.parse.quote(rng.choice(queries))
            start = time.perf_counter()
            try:
                connection.request("GET", url)
                response = connection.getresponse()
                body = response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException) as exc:
                ok, body = False, repr(exc).encode()
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            latencies[i].append(time.perf_counter() - start)
            if not ok:
                errors[i] += 1
                if len(samples) < 5:
                    samples.append(body[:300].decode("utf-8", "replace"))
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    ms = np.asarray([x for per in latencies for x in per]) * 1000.0
    return {"requests": int(len(ms)), "seconds": wall, "requests_per_s": len(ms) / wall,
            "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()), "errors": int(sum(errors)),
            "error_samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", required=True, type=Path, help="embedded index directory (built by 'hybrid-qpr ingest')")
    parser.add_argument("--pairs", required=True, help="the file the index was built from (queries are sampled from it)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0, help="duration per endpoint")
    parser.add_argument("--endpoints", default="search,compare")
    parser.add_argument("--queries", type=int, default=5000, help="distinct questions sampled as queries")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    texts = list(dict.fromkeys(doc.text for _, doc in iter_documents(args.pairs, bad_lines=BadLines("skip"))))
    queries = random.Random(args.seed).sample(texts, min(args.queries, len(texts)))
    port = free_port()
    result: dict = {"command": command_line(), "pairs": repo_relative(args.pairs),
                    "clients": args.clients, "seconds_per_endpoint": args.seconds, "cpus": os.cpu_count(),
                    "load_average_at_start": os.getloadavg(), "endpoints": {}}
    with tempfile.TemporaryDirectory(prefix="hqpr-bench-judgments-") as judgments:
        server = start_server(args.index, port, Path(judgments))
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("GET", "/api/health")
            health = json.loads(connection.getresponse().read())
            result.update(documents=health["documents"], model=health["model"], backend=health["backend"])
            print("serving", health["documents"], "documents with", health["model"], flush=True)
            for name in args.endpoints.split(","):
                run_clients(port, PATHS[name], queries[:50], 2, 3.0, args.seed)  # warm-up, not reported
                measured = run_clients(port, PATHS[name], queries, args.clients, args.seconds, args.seed)
                result["endpoints"][name] = measured
                print(name, json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in measured.items()}),
                      flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    result["load_average_at_end"] = os.getloadavg()
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
