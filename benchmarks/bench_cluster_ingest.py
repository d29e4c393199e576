"""Cluster ingest against the node's own rate: bare HTTP ``_bulk`` vs ``ClusterBackend.ingest``.

Corpus: the first ``--docs`` unique questions of a Quora-layout pair file, encoded once with
the model (``--model``, default the committed one) and cached as ``.npy`` in ``--cache``, so
both sides send the same vectors and encoding is measured once, on its own.

Per engine, in one run:

1. **the node's own rate**: bare HTTP ``_bulk`` (urllib3, no client library) into an index
   with hybrid-qpr's mapping, with the load settings both engines' tuning guides advise
   (``refresh_interval: -1`` and ``number_of_replicas: 0`` while loading, then the defaults
   restored and a refresh). The request bodies are built before the clock starts, so the
   client costs the node almost no CPU. ``--sweep-docs`` documents per setting sweep the
   bulk size (``--bulk-sizes``) and the number of requests in flight (``--clients``); the
   best setting then loads all ``--docs``. Timed: first request to the refresh's answer;
2. **hybrid-qpr's ingest** of the same documents into a fresh index, with an encoder that
   hands back the cached vectors (same model facts), so it is timed without the model;
   ``--with-encoding`` also times it with the real encoder;
3. **exactness**: the count is ``--docs``, ``--sample`` ids read back hold the same text
   and the same float32 vector, and a second ingest of the same documents adds nothing.

Every timed load (sweep points included) starts ``--settle`` seconds after the previous one
ended, so the node's background merges of one load do not fall on the next (without it the
ingest, which came last, was timed while the node still merged the bare load it had just
deleted: 0.77x on OpenSearch against 0.86-0.88x alone). Prints docs/s for both, the ratio
(target >= 0.8), and writes ``--json``. The indexes are
deleted at the end (names ``hqpr-ingest-bench-*``).

Example (the numbers in docs/opensearch.md and docs/elasticsearch.md)::

    nice -n 10 python benchmarks/bench_cluster_ingest.py --cache WORKDIR \\
        --opensearch http://127.0.0.1:9200 --elasticsearch http://127.0.0.1:9201
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from _common import DEFAULT_DATA, command_line, load_pairs_slice, repo_relative


class CachedEncoder:
    """An encoder that answers with vectors computed before (by text), carrying the real
    model's facts, so an ingest is timed without the model and sends the same vectors."""

    def __init__(self, encoder, texts: list[str], vectors: np.ndarray):
        self.model_dir, self.kind, self.dim = encoder.model_dir, encoder.kind, encoder.dim
        self.distance, self.fingerprint = encoder.distance, encoder.fingerprint
        self.rows = {text: row for row, text in enumerate(texts)}
        self.vectors = vectors

    def encode(self, texts, batch_size: int = 256, show_progress: bool = False, side: str = "document") -> np.ndarray:
        return self.vectors[[self.rows[t] for t in texts]]


def cached_vectors(encoder, docs, cache: Path) -> tuple[np.ndarray, float]:
    """The document vectors (from ``cache`` when there) and the docs/s encoding them took (0 if cached)."""
    path = cache / f"vectors-{encoder.fingerprint[:16]}-{len(docs)}.npy"
    if path.exists():
        return np.load(path), 0.0
    start = time.perf_counter()
    vectors = encoder.encode([d.text for d in docs], batch_size=256, side="document")
    rate = len(docs) / (time.perf_counter() - start)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors, rate


class BareNode:
    """Plain urllib3 requests to one node: the client a bulk-loading script would write."""

    def __init__(self, url: str):
        import urllib3

        self.url = url.rstrip("/")
        self.http = urllib3.PoolManager(maxsize=16, timeout=urllib3.Timeout(total=300))

    def call(self, method: str, path: str, body: str | bytes | dict | None = None, ndjson: bool = False) -> dict:
        data = json.dumps(body) if isinstance(body, dict) else body
        headers = {"content-type": "application/x-ndjson" if ndjson else "application/json"}
        answer = self.http.request(method, self.url + path, body=data, headers=headers)
        if answer.status >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status} {answer.data[:300]!r}")
        return json.loads(answer.data or b"{}")


def bulk_lines(backend, docs, vectors: np.ndarray, index: str, distance: str) -> list[bytes]:
    """One ``index`` action per document with what hybrid-qpr stores (text, vector, empty
    metadata, and the BM25 token field where the engine needs it), as UTF-8 NDJSON."""
    from hybrid_qpr.backends.cluster.bodies import METADATA_FIELD, TEXT_FIELD, VECTOR_FIELD, bm25_tokens
    from hybrid_qpr.distance import prepare_vectors

    try:  # the shortest float32 text of each number: the fewest bytes for the node to read
        import orjson

        def dumps(value) -> bytes:
            return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except ImportError:
        def dumps(value) -> bytes:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=np.ndarray.tolist).encode()
    prepared = prepare_vectors(vectors, distance)
    lines = []
    for doc, vector in zip(docs, prepared):
        source = {TEXT_FIELD: doc.text, VECTOR_FIELD: vector, METADATA_FIELD: doc.metadata}
        if backend.bm25_field != TEXT_FIELD:
            source[backend.bm25_field] = bm25_tokens(doc.text, backend.analyzer)
        lines.append(b"%s\n%s\n" % (dumps({"index": {"_index": index, "_id": doc.id}}), dumps(source)))
    return lines


def bare_load(node: BareNode, backend, encoder, index: str, lines: list[bytes], bulk: int, clients: int) -> float:
    """Create ``index`` with hybrid-qpr's body and the load settings, send ``lines`` in
    requests of ``bulk`` with ``clients`` in flight, restore the settings, refresh; docs/s."""
    body = backend.index_body(encoder.dim, encoder.distance, encoder.fingerprint, encoder.kind, shards=1, replicas=0)
    body["settings"]["index"].update(refresh_interval="-1", number_of_replicas=0)
    node.call("PUT", f"/{index}", body)
    chunks: queue.Queue = queue.Queue()
    for start in range(0, len(lines), bulk):
        chunks.put(b"".join(lines[start:start + bulk]))
    errors: list[str] = []

    def send() -> None:
        while True:
            try:
                payload = chunks.get_nowait()
            except queue.Empty:
                return
            answer = node.call("POST", "/_bulk?filter_path=errors,items.*.error", payload, ndjson=True)
            if answer.get("errors"):
                errors.append(str(answer)[:300])

    start = time.perf_counter()
    workers = [threading.Thread(target=send) for _ in range(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    node.call("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None, "number_of_replicas": 0}})
    node.call("POST", f"/{index}/_refresh")
    seconds = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"bare bulk into {index}: {errors[0]}")
    count = node.call("GET", f"/{index}/_count")["count"]
    if count != len(lines):
        raise RuntimeError(f"bare bulk into {index}: {count} documents, expected {len(lines)}")
    return len(lines) / seconds


def check_exact(backend, docs, vectors: np.ndarray, sample: int, seed: int) -> dict:
    """Count, and ``sample`` random ids read back with their text and float32 vector."""
    from hybrid_qpr.distance import prepare_vectors

    prepared = prepare_vectors(vectors, backend.distance)
    rows = np.random.default_rng(seed).choice(len(docs), size=min(sample, len(docs)), replace=False)
    answer = backend.request("POST", backend.path("_mget"), {"ids": [docs[r].id for r in rows]},
                             {"_source_includes": "text,embedding"}, what="reading back a sample")
    same = 0
    for row, doc in zip(rows, answer["docs"]):
        source = doc.get("_source") or {}
        vector = np.asarray(source.get("embedding", []), dtype=np.float32)
        same += (doc.get("found") and source.get("text") == docs[row].text and vector.shape == prepared[row].shape
                 and bool(np.array_equal(vector, prepared[row])))
    return {"count": backend.count(), "sample": len(rows), "sample_equal": int(same)}


def run_engine(engine: str, url: str, args, docs, vectors: np.ndarray, encoder) -> dict:
    from _common import cluster_backend

    tag = uuid.uuid4().hex[:8]
    node = BareNode(url)
    made: list[str] = []

    def fresh(name: str):
        index = f"hqpr-ingest-bench-{tag}-{name}"
        made.append(index)
        backend = cluster_backend(engine, url, index, timeout=300)
        return backend

    result: dict = {"engine": engine, "sweep": []}
    try:
        probe = fresh("probe")
        sweep_docs = min(args.sweep_docs, len(docs))
        best = (0.0, 0, 0)
        for clients in args.clients:
            for bulk in args.bulk_sizes:
                index = f"hqpr-ingest-bench-{tag}-sweep-{bulk}-{clients}"
                made.append(index)
                lines = bulk_lines(probe, docs[:sweep_docs], vectors[:sweep_docs], index, encoder.distance)
                time.sleep(args.settle)
                rate = bare_load(node, probe, encoder, index, lines, bulk, clients)
                node.call("DELETE", f"/{index}")
                print(f"  {engine} bare sweep: bulk {bulk:>5}, {clients} in flight: {rate:8.0f} docs/s "
                      f"({sweep_docs} docs)", flush=True)
                result["sweep"].append({"bulk": bulk, "clients": clients, "docs": sweep_docs, "docs_per_s": rate})
                best = max(best, (rate, bulk, clients))
        _, bulk, clients = best
        index = f"hqpr-ingest-bench-{tag}-bare"
        made.append(index)
        lines = bulk_lines(probe, docs, vectors, index, encoder.distance)
        time.sleep(args.settle)
        result["bare"] = {"bulk": bulk, "clients": clients,
                          "docs_per_s": bare_load(node, probe, encoder, index, lines, bulk, clients)}
        del lines
        print(f"  {engine} bare, all {len(docs)}: bulk {bulk}, {clients} in flight: "
              f"{result['bare']['docs_per_s']:.0f} docs/s", flush=True)
        node.call("DELETE", f"/{index}")

        cached = CachedEncoder(encoder, [d.text for d in docs], vectors)
        backend = fresh("hqpr")
        time.sleep(args.settle)
        start = time.perf_counter()
        report = backend.ingest(docs, cached, show_progress=False, **args.ingest_options)
        seconds = time.perf_counter() - start
        print(f"  {engine} hybrid-qpr ingest: {len(docs) / seconds:.0f} docs/s", flush=True)
        result["hybrid_qpr"] = {"docs_per_s": len(docs) / seconds, "seconds": seconds,
                                "indexed": report.indexed, "failed": len(report.failed),
                                "options": args.ingest_options}
        exact = check_exact(backend, docs, vectors, args.sample, args.seed)
        rerun = docs[:args.rerun_docs] if args.rerun_docs else docs
        again = backend.ingest(rerun, cached, show_progress=False, **args.ingest_options)
        exact.update(rerun_indexed=again.indexed, rerun_updated=again.updated, rerun_failed=len(again.failed),
                     count_after_rerun=backend.count(), rerun_docs=len(rerun),
                     rerun_docs_per_s=len(rerun) / again.seconds)
        exact["ok"] = (exact["count"] == len(docs) == exact["count_after_rerun"] and exact["sample_equal"] == exact["sample"]
                       and again.indexed == 0 and not report.failed and not again.failed)
        result["exact"] = exact
        if args.with_encoding:
            backend = fresh("hqpr-encode")
            full = backend.ingest(docs, encoder, show_progress=False, **args.ingest_options)
            result["hybrid_qpr_with_encoding"] = {"docs_per_s": len(docs) / full.seconds, "failed": len(full.failed)}
        result["ratio"] = result["hybrid_qpr"]["docs_per_s"] / result["bare"]["docs_per_s"]
        return result
    finally:
        for index in made:
            node.http.request("DELETE", f"{node.url}/{index}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opensearch", default=None, help="OpenSearch URL (left out: that engine is not measured)")
    parser.add_argument("--elasticsearch", default=None, help="Elasticsearch URL (left out: not measured)")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Quora-layout pair file [default: %(default)s]")
    parser.add_argument("--docs", type=int, default=120_000, help="unique questions [default: %(default)s]")
    parser.add_argument("--model", default=None, help="model directory [default: the committed onnx/ model]")
    parser.add_argument("--cache", required=True, help="folder for the cached document vectors (.npy)")
    parser.add_argument("--bulk-sizes", default="250,500,1000,2000", help="bare bulk sizes swept [default: %(default)s]")
    parser.add_argument("--clients", default="1,2", help="bare requests in flight swept [default: %(default)s]")
    parser.add_argument("--sweep-docs", type=int, default=30_000, help="documents per sweep point [default: %(default)s]")
    parser.add_argument("--sample", type=int, default=500, help="ids read back for exactness [default: %(default)s]")
    parser.add_argument("--rerun-docs", type=int, default=None,
                        help="documents the second ingest sends again (the first N) [default: all]")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds the node rests before each timed load (merges of the last one) [default: %(default)s]")
    parser.add_argument("--ingest-options", default="{}", help="JSON keyword arguments for ingest [default: none]")
    parser.add_argument("--with-encoding", action="store_true", help="also time hybrid-qpr's ingest with the real model")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    args.bulk_sizes = [int(b) for b in args.bulk_sizes.split(",")]
    args.clients = [int(c) for c in args.clients.split(",")]
    args.ingest_options = json.loads(args.ingest_options)
    engines = [(e, u) for e, u in (("opensearch", args.opensearch), ("elasticsearch", args.elasticsearch)) if u]
    if not engines:
        parser.error("give --opensearch URL and/or --elasticsearch URL")

    from hybrid_qpr.artifacts import write_json
    from hybrid_qpr.encoders import Encoder

    docs, _ = load_pairs_slice(args.data, args.docs, 0, args.seed)
    encoder = Encoder.load(args.model)
    vectors, encode_rate = cached_vectors(encoder, docs, Path(args.cache))
    print(f"{len(docs)} unique questions, model {encoder.model_dir.name} (dim {encoder.dim}); encoding: "
          + (f"{encode_rate:.0f} docs/s" if encode_rate else "cached"), flush=True)
    results = {"command": command_line(), "docs": len(docs), "model": repo_relative(encoder.model_dir),
               "encode_docs_per_s": encode_rate or None, "load_average": os.getloadavg(), "engines": []}
    for engine, url in engines:
        results["engines"].append(run_engine(engine, url, args, docs, vectors, encoder))
    print(f"\n{'engine':<14}{'bare docs/s':>12}{'bulk':>6}{'in flight':>10}{'hybrid-qpr docs/s':>19}{'ratio':>7}  exact")
    for row in results["engines"]:
        exact = row["exact"]
        print(f"{row['engine']:<14}{row['bare']['docs_per_s']:>12.0f}{row['bare']['bulk']:>6}{row['bare']['clients']:>10}"
              f"{row['hybrid_qpr']['docs_per_s']:>19.0f}{row['ratio']:>7.2f}  "
              f"{'yes' if exact['ok'] else 'NO'} (count {exact['count']}, {exact['sample_equal']}/{exact['sample']} "
              f"read back equal, re-run of {exact['rerun_docs']} added {exact['rerun_indexed']}, "
              f"re-run {exact['rerun_docs_per_s']:.0f} docs/s)")
        if "hybrid_qpr_with_encoding" in row:
            print(f"{'':<14}with encoding: {row['hybrid_qpr_with_encoding']['docs_per_s']:.0f} docs/s")
    results["load_average_after"] = os.getloadavg()
    if args.json_out:
        write_json(args.json_out, results)
    return 0 if all(r["exact"]["ok"] for r in results["engines"]) else 1


if __name__ == "__main__":
    sys.exit(main())
