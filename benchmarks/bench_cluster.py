"""Benchmark a backend - embedded, OpenSearch or Elasticsearch - on the same Quora slice.

Corpus: the first ``--docs`` unique questions of a Quora-layout pair file. Queries: the
partner questions of duplicate pairs whose other side is in the corpus (what a paraphrase
search really receives); that other side is the one relevant document, so every mode also
gets a quality figure (H@1 and MRR@10 over the timed queries).

Measured, in this order:

1. ingest docs/s (encode + write + refresh, as ``hybrid-qpr ingest``);
2. kNN recall@10 of the backend against exact search (brute force over the same vectors);
3. latency per mode, wall-clock from text to the top ``--top-k`` results with id, text and
   metadata (every mode runs through ``HybridSearcher.search``, so every one ends with the
   same document fetch); the vector modes include encoding the query. Modes are interleaved
   query by query so drift on a shared machine hits them alike:

* ``bm25``, ``knn``; ``hybrid`` (both lists of ``--depth``, one ``_msearch`` on a cluster,
  fused client-side with ``--fusion``/``--alpha``); ``rerank`` (BM25 ``--depth``, then exact
  similarity of those ids: the MSEM flow);
* OpenSearch also ``hybrid-server`` (neural-search ``hybrid`` query with the same fusion sent
  as an inline pipeline) and ``rerank-server`` (``rescore`` with ``knn_score``);
* Elasticsearch also ``hybrid-1req`` (``query`` + ``knn`` with boosts in one search, the
  server-side option of a basic licence; raw scores summed, no normalisation).

``--levers`` adds, interleaved with the modes above, the same searches with one lever undone:
``bm25+mget`` / ``hybrid+mget`` (searches return bare ids, then one ``_mget`` fetches the
documents: how the client fetched results before) and ``bm25 gzip`` / ``hybrid gzip`` (a second client with
HTTP compression switched the other way from ``--compress``), and ``bm25 new conn`` (a new
client per query, so every search opens its connection: what a warm pool saves). ``--curve 10,20,50,100`` measures,
per HNSW candidate count, kNN recall@10 against exact search and the kNN-only p50 (the
recall/latency curve behind ``default_knn_candidates``). ``--reuse`` keeps a cluster index holding exactly
``--docs`` documents instead of re-ingesting (ingest is then not measured).

Examples (the numbers in README.md and docs/elasticsearch.md)::

    nice -n 10 python benchmarks/bench_cluster.py --engine elasticsearch --url http://127.0.0.1:9201 --docs 20000
    nice -n 10 python benchmarks/bench_cluster.py --engine opensearch --url http://127.0.0.1:9200 --docs 20000
    nice -n 10 python benchmarks/bench_cluster.py --engine local --docs 20000
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import DEFAULT_DATA, command_line, load_pairs_slice, repo_relative


def search_hits(backend, body: dict, what: str, params: dict | None = None) -> list:
    """The hits of one ``_search`` with ``body`` through the backend's public request method,
    raw engine scores, each with its stored document: for the searches the library does not
    offer (one-request ES hybrid, OpenSearch's older kNN form)."""
    from hybrid_qpr.backends.cluster.bodies import SEARCH_FILTER
    from hybrid_qpr.types import Document, Hit

    answer = backend.request("POST", backend.path("_search"), body, {"filter_path": SEARCH_FILTER, **(params or {})},
                             what=what)
    return [Hit(h["_id"], float(h["_score"]),
                Document(h["_id"], h["_source"].get("text", ""), h["_source"].get("metadata") or {})
                if "_source" in h else None)
            for h in answer.get("hits", {}).get("hits", [])]


def es_one_request(backend, query: str, vector, depth: int, *, alpha: float):
    """What a basic licence allows server-side: ``query`` (BM25) and ``knn`` in one search, each
    document scored ``(1 - alpha) * bm25 + alpha * knn_score`` on the raw scales (no normalisation:
    BM25 runs 0..~20, the kNN score 0..1). Measured against client-side fusion, which won
    (docs/elasticsearch.md); the library does not offer it."""
    from hybrid_qpr.backends.cluster.bodies import bm25_query

    body = backend.knn_body(vector, depth, None)
    body["knn"]["boost"] = float(alpha)
    query_clause = bm25_query(query, None, backend.bm25_field, backend.analyzer)
    query_clause["bool"]["boost"] = float(1.0 - alpha)
    body["query"] = query_clause
    return search_hits(backend, body, "BM25 + kNN in one search")


def open_backend(args, encoder, workdir: Path):
    """A fresh, empty backend of ``args.engine`` and a function that forces a merge to one segment."""
    if args.engine == "local":
        from hybrid_qpr.backends.local import LocalIndex

        return LocalIndex.create(workdir / "idx", encoder), lambda: None
    if args.engine == "opensearch":
        from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect

        backend = OpenSearchBackend(connect(args.url, timeout=120, compress=args.compress), args.index,
                                    knn_candidates=args.knn_candidates)
    else:
        from hybrid_qpr.backends import elasticsearch as es

        es.VECTOR_INDEX_TYPE = args.vector_index_type
        backend = es.ElasticsearchBackend(es.connect(args.url, timeout=120, compress=args.compress), args.index,
                                          knn_candidates=args.knn_candidates)
    if not args.reuse:
        backend.drop()

    def merge() -> None:
        backend.transport.request("POST", f"/{args.index}/_forcemerge", params={"max_num_segments": "1"}, timeout=900)

    return backend, merge


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["local", "opensearch", "elasticsearch"], required=True)
    parser.add_argument("--url", default=None, help="cluster URL [default: $HYBRID_QPR_<ENGINE>_URL or the local node]")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Quora-layout pair file [default: %(default)s]")
    parser.add_argument("--docs", type=int, default=20000, help="unique questions to index [default: %(default)s]")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per mode [default: %(default)s]")
    parser.add_argument("--warmup", type=int, default=30, help="untimed queries per mode first [default: %(default)s]")
    parser.add_argument("--model", default=None, help="model directory [default: the committed onnx/ model]")
    parser.add_argument("--index", default="hqpr-bench", help="cluster index to (re)create [default: %(default)s]")
    parser.add_argument("--vector-index-type", default="hnsw", choices=["hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw"],
                        help="Elasticsearch dense_vector index_options type [default: %(default)s]")
    parser.add_argument("--batch-size", type=int, default=256, help="encode + bulk batch size [default: %(default)s]")
    parser.add_argument("--top-k", type=int, default=10, help="results per query [default: %(default)s]")
    parser.add_argument("--depth", type=int, default=30, help="candidates per list for hybrid and rerank [default: %(default)s]")
    parser.add_argument("--fusion", default="rrf", help="client-side fusion for hybrid [default: %(default)s]")
    parser.add_argument("--alpha", type=float, default=0.5, help="kNN weight for hybrid [default: %(default)s]")
    parser.add_argument("--keep", action="store_true", help="keep the cluster index afterwards")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the cluster index if it holds exactly --docs documents (skips the ingest); implies --keep")
    parser.add_argument("--knn-candidates", type=int, default=None,
                        help="HNSW candidate floor of kNN searches [default: the engine backend's default_knn_candidates]")
    parser.add_argument("--compress", action=argparse.BooleanOptionalAction, default=None,
                        help="HTTP compression of the client [default: the library's: off on loopback, else on]")
    parser.add_argument("--levers", action="store_true", help="also time the searches with one lever undone (see above)")
    parser.add_argument("--curve", default=None, help="comma-separated HNSW candidate counts: recall@10 and kNN p50 each")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    args.keep = args.keep or args.reuse
    if args.engine != "local" and args.compress is None:
        from hybrid_qpr.backends.cluster.connection import compress_by_default, resolve_options

        args.compress = compress_by_default(resolve_options(args.engine, args.url).url)

    from hybrid_qpr.artifacts import write_json
    from hybrid_qpr.distance import similarity
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import latency_summary
    from hybrid_qpr.search import HybridSearcher, SearchResult

    docs, queries = load_pairs_slice(args.data, args.docs, args.queries + args.warmup, args.seed)
    if len(queries) < args.queries + args.warmup:
        print(f"only {len(queries)} queries available; lower --queries", file=sys.stderr)
    encoder = Encoder.load(args.model)
    workdir = Path(tempfile.mkdtemp(prefix="hqpr-bench-"))
    try:
        backend, merge = open_backend(args, encoder, workdir)
        from hybrid_qpr.backends.base import IngestReport

        if args.reuse and args.engine != "local" and backend.exists() and backend.count() == len(docs):
            report = IngestReport()  # not measured
        else:
            if args.engine != "local":
                backend.drop()  # --reuse of an index that does not hold exactly these documents
            report = backend.ingest(docs, encoder, batch_size=args.batch_size, show_progress=False)
            merge()
        if args.engine == "local":  # LocalIndex.ingest writes a new directory: open what it wrote
            from hybrid_qpr.backends.local import LocalIndex

            backend = LocalIndex.open(workdir / "idx")
        searcher = HybridSearcher(backend, encoder)
        k, depth = args.top_k, args.depth

        # kNN recall@10 against exact search over the same vectors
        doc_vectors = encoder.encode([d.text for d in docs], batch_size=args.batch_size)
        query_vectors = encoder.encode([q for q, _ in queries], batch_size=args.batch_size)
        exact = np.argsort(-similarity(query_vectors, doc_vectors, encoder.distance), axis=1)[:, :10]
        exact_ids = [{docs[j].id for j in row} for row in exact]

        def recall_at_10(search) -> float:
            return sum(len(ids & {h.id for h in search(v)}) for ids, v in zip(exact_ids, query_vectors)) / (10 * len(queries))

        recall = recall_at_10(lambda v: backend.knn(v, 10))
        curve = knn_curve(args, backend, query_vectors, recall_at_10) if args.curve else None

        modes = {
            "bm25": lambda q: searcher.search(q, mode="bm25", top_k=k),
            "knn": lambda q: searcher.search(q, mode="knn", top_k=k),
            "hybrid": lambda q: searcher.search(q, mode="hybrid", fusion=args.fusion, alpha=args.alpha, top_k=k, depth=depth),
            "rerank": lambda q: searcher.search(q, mode="rerank", top_k=k, rerank_depth=depth),
        }
        if args.engine == "opensearch":
            modes["hybrid-server"] = lambda q: searcher.search(q, mode="hybrid", fusion=args.fusion, alpha=args.alpha,
                                                               top_k=k, depth=depth, server_side=True)
            modes["rerank-server"] = lambda q: searcher.search(q, mode="rerank", top_k=k, rerank_depth=depth,
                                                               server_side=True)
        if args.engine == "elasticsearch":
            def one_request(q):  # same encode + document fetch as the other modes
                hits = es_one_request(backend, q, encoder.encode([q])[0], depth, alpha=args.alpha)[:k]
                return [SearchResult(h.id, h.document.text, h.score, dict(h.document.metadata)) for h in hits]

            modes["hybrid-1req"] = one_request
        if args.levers and args.engine != "local":
            add_lever_modes(args, modes, backend, encoder, k, depth)
        warm, timed = queries[: args.warmup], queries[args.warmup:]
        for q, _ in warm:
            for run in modes.values():
                run(q)
        times: dict[str, list[float]] = {name: [] for name in modes}
        ranks: dict[str, list[int | None]] = {name: [] for name in modes}
        for q, relevant in timed:
            for name, run in modes.items():
                t = time.perf_counter()
                results = run(q)
                times[name].append(time.perf_counter() - t)
                ids = [r.id for r in results]
                ranks[name].append(ids.index(relevant) + 1 if relevant in ids else None)
        rows = {}
        for name in modes:
            lat = latency_summary(times[name])
            rows[name] = {"p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "mean_ms": lat["mean_ms"],
                          "H@1": sum(r == 1 for r in ranks[name]) / len(timed),
                          f"MRR@{k}": sum(1 / r for r in ranks[name] if r) / len(timed)}
        base = rows["bm25"]["p50_ms"]
        print(f"\n{args.engine}: {len(docs)} unique questions from {Path(args.data).name}; {len(timed)} timed queries "
              f"(+{len(warm)} warm-up); model {encoder.model_dir.name} ({encoder.kind}, dim {encoder.dim}); top {k}, "
              f"depth {depth}, hybrid {args.fusion} alpha {args.alpha}"
              + (f"; dense_vector {args.vector_index_type}" if args.engine == "elasticsearch" else ""))
        print(f"ingest: {report.indexed + report.updated} docs in {report.seconds:.1f} s = {report.docs_per_second:.0f} "
              f"docs/s; failed {len(report.failed)}; kNN recall@10 vs exact {recall:.4f}"
              + (f" (HNSW candidates {backend.knn_candidates})" if args.engine != "local" else ""))
        if curve:
            print(f"{'candidates':>10}{'recall@10':>11}{'knn p50 ms':>12}{'knn p99 ms':>12}"
                  + (f"{'k-form recall':>15}{'k-form p50':>12}" if "k_form_p50_ms" in curve[0] else ""))
            for row in curve:
                print(f"{row['candidates']:>10}{row['recall_at_10']:>11.4f}{row['p50_ms']:>12.2f}{row['p99_ms']:>12.2f}"
                      + (f"{row['k_form_recall_at_10']:>15.4f}{row['k_form_p50_ms']:>12.2f}" if "k_form_p50_ms" in row else ""))
        print(f"{'mode':<15}{'p50 ms':>9}{'p99 ms':>9}{'p50/bm25':>10}{'H@1':>8}{'MRR@' + str(k):>9}")
        for name, row in rows.items():
            print(f"{name:<15}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['p50_ms'] / base:>9.2f}x"
                  f"{row['H@1']:>8.3f}{row[f'MRR@{k}']:>9.3f}")
        if args.json_out:
            write_json(args.json_out, {
                "command": command_line(), "engine": args.engine, "docs": len(docs),
                "queries": len(timed), "top_k": k, "depth": depth, "fusion": args.fusion, "alpha": args.alpha,
                "vector_index_type": args.vector_index_type if args.engine == "elasticsearch" else None,
                "model": repo_relative(encoder.model_dir), "ingest_docs_per_s": report.docs_per_second,
                "knn_candidates": getattr(backend, "knn_candidates", None), "compress": args.compress,
                "knn_recall_at_10": recall, "knn_curve": curve, "modes": rows})
        if args.engine != "local" and not args.keep:
            backend.drop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def knn_curve(args, backend, query_vectors, recall_at_10) -> list[dict]:
    """Per HNSW candidate count: recall@10 against exact search and the kNN-only latency
    (top 10, counts interleaved query by query). On OpenSearch the count is the knn clause's
    ``method_parameters.ef_search`` (with ``k`` = 10); the older form, ``k`` = the count with
    no ``ef_search``, is timed beside it (``k-form``)."""
    from hybrid_qpr.backends.cluster.bodies import VECTOR_FIELD
    from hybrid_qpr.evaluation.evaluator import latency_summary

    counts = [int(c) for c in args.curve.split(",")]
    default = backend.knn_candidates

    def k_form(v, count: int):
        body = {"size": 10, "_source": ["text", "metadata"],
                "query": {"knn": {VECTOR_FIELD: {"vector": backend.query_vector(v), "k": max(10, count)}}}}
        return search_hits(backend, body, "kNN search")  # only the ids count (recall), not the score scale

    variants = {("ef", c): (lambda v, c=c: (setattr(backend, "knn_candidates", c), backend.knn(v, 10))[1]) for c in counts}
    if args.engine == "opensearch":
        variants.update({("k", c): (lambda v, c=c: k_form(v, c)) for c in counts})
    recalls = {key: recall_at_10(run) for key, run in variants.items()}  # also warms every variant up
    times: dict = {key: [] for key in variants}
    for v in query_vectors:
        for key, run in variants.items():
            t = time.perf_counter()
            run(v)
            times[key].append(time.perf_counter() - t)
    backend.knn_candidates = default
    rows = []
    for c in counts:
        row = {"candidates": c, "recall_at_10": recalls[("ef", c)], "p50_ms": latency_summary(times[("ef", c)])["p50_ms"],
               "p99_ms": latency_summary(times[("ef", c)])["p99_ms"]}
        if ("k", c) in times:
            row.update(k_form_recall_at_10=recalls[("k", c)], k_form_p50_ms=latency_summary(times[("k", c)])["p50_ms"])
        rows.append(row)
    return rows


def add_lever_modes(args, modes: dict, backend, encoder, k: int, depth: int) -> None:
    """The bm25 and hybrid modes with one lever undone: documents fetched by ``_mget`` after
    the search, or HTTP compression switched the other way (a client of its own)."""
    from hybrid_qpr.search import HybridSearcher

    engine = type(backend)
    bare = engine(backend.client, backend.index, documents_in_hits=False, knn_candidates=backend.knn_candidates)
    if args.engine == "opensearch":
        from hybrid_qpr.backends.opensearch import connect
    else:
        from hybrid_qpr.backends.elasticsearch import connect
    other = engine(connect(args.url, timeout=120, compress=not args.compress), backend.index,
                   knn_candidates=backend.knn_candidates)
    gzip = "gzip" if not args.compress else "plain"
    for label, searcher in (("+mget", HybridSearcher(bare, encoder)), (f" {gzip}", HybridSearcher(other, encoder))):
        modes["bm25" + label] = lambda q, s=searcher: s.search(q, mode="bm25", top_k=k)
        modes["hybrid" + label] = lambda q, s=searcher: s.search(q, mode="hybrid", fusion=args.fusion, alpha=args.alpha,
                                                                  top_k=k, depth=depth)

    from hybrid_qpr.backends.cluster.bodies import bm25_body

    # the one request of ``backend.bm25`` (a new backend would first read the index settings,
    # which a long-lived one has cached: sent as is, only the new connection is measured)
    search_type = {"search_type": backend.bm25_search_type()}

    def cold_pool(q):  # a client of its own per query: the TCP connection is opened for this search
        fresh = engine(connect(args.url, timeout=120, compress=args.compress, check=False), backend.index)
        try:
            return search_hits(fresh, bm25_body(q, k, None, backend.bm25_field, backend.analyzer, backend.documents_in_hits),
                               "BM25 search", search_type)
        finally:
            fresh.close()

    modes["bm25 new conn"] = cold_pool


if __name__ == "__main__":
    sys.exit(main())
