"""Benchmark the OpenSearch backend: ingest docs/s, then query latency per mode vs BM25-only.

Corpus: the first ``--docs`` unique questions of a Quora-layout pair file. Queries: the
partner questions of duplicate pairs whose other side is in the corpus (what a paraphrase
search really receives). Latency is wall-clock per query from text to the top ``--top-k``
results with their text (every mode runs through ``HybridSearcher.search``, so every mode
ends with the same one-request document fetch); the vector modes include encoding the query
with the ONNX model. Modes are interleaved query by query. Modes:

* ``bm25``           - ``match`` query only (the baseline)
* ``knn``            - encode + Lucene HNSW ``knn`` query
* ``hybrid``         - encode + BM25 and kNN lists of ``--depth`` in one ``_msearch``, fused client-side (RRF)
* ``hybrid-server``  - encode + one neural-search ``hybrid`` query (``--depth`` per sub-query), ``hybrid-qpr-rrf`` pipeline
* ``rerank``         - BM25 recall of ``--depth``, then ``knn_score`` re-scoring of those ids (two requests)
* ``rerank-server``  - the same in one request: BM25 + ``rescore`` with the ``knn_score`` script

Example (the numbers in docs/opensearch.md)::

    hybrid-qpr cluster start
    python benchmarks/bench_opensearch.py --docs 5000 --queries 300 --warmup 30 --json /tmp/o-bench.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

DEFAULT_DATA = "/work/shared/data/quora-pairs.tsv.gz"


def load(path: str, n_docs: int, n_queries: int, seed: int):
    from hybrid_qpr.types import Document
    from hybrid_qpr.data.pairs import iter_pairs
    from hybrid_qpr.text import text_id

    docs: dict[str, Document] = {}
    by_text: dict[str, str] = {}
    candidates: list[str] = []
    for pair in iter_pairs(path, on_bad_line="skip"):
        for qid, text in ((pair.qid1, pair.question1), (pair.qid2, pair.question2)):
            if len(docs) < n_docs and text not in by_text:
                doc_id = qid or text_id(text)
                docs[doc_id] = Document(doc_id, text)
                by_text[text] = doc_id
        if pair.is_duplicate and pair.question1 in by_text and pair.question2 not in by_text:
            candidates.append(pair.question2)
        if len(docs) >= n_docs and len(candidates) >= n_queries * 3:
            break
    random.Random(seed).shuffle(candidates)
    return list(docs.values()), candidates[:n_queries]




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=DEFAULT_DATA, help="Quora-layout pair file [default: %(default)s]")
    parser.add_argument("--docs", type=int, default=20000, help="unique questions to index [default: %(default)s]")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per mode [default: %(default)s]")
    parser.add_argument("--warmup", type=int, default=30, help="untimed queries per mode first [default: %(default)s]")
    parser.add_argument("--model", default=None, help="model directory [default: the committed onnx/sdml-cnn-quora]")
    parser.add_argument("--opensearch", default=None, help="URL [default: $HYBRID_QPR_OPENSEARCH_URL or the local node]")
    parser.add_argument("--index", default="hqpr-bench", help="index to (re)create [default: %(default)s]")
    parser.add_argument("--batch-size", type=int, default=256, help="encode + bulk batch size [default: %(default)s]")
    parser.add_argument("--top-k", type=int, default=10, help="results per query [default: %(default)s]")
    parser.add_argument("--depth", type=int, default=30,
                        help="candidates per list for both hybrids and rerank [default: %(default)s, the MSEM flow's recall]")
    parser.add_argument("--keep", action="store_true", help="keep the index afterwards")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)

    from _results import relative_if_path, repo_relative
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect, install_pipelines
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import latency_summary
    from hybrid_qpr.search import HybridSearcher

    docs, queries = load(args.data, args.docs, args.queries + args.warmup, args.seed)
    if len(queries) < args.queries + args.warmup:
        print(f"only {len(queries)} queries available; lower --queries", file=sys.stderr)
    encoder = Encoder.load(args.model)
    client = connect(args.opensearch, timeout=120)
    backend = OpenSearchBackend(client, args.index)
    backend.drop()
    install_pipelines(client, ["rrf"])

    report = backend.ingest(docs, encoder, batch_size=args.batch_size, show_progress=True)
    t0 = time.perf_counter()
    encoder.encode([d.text for d in docs[:5000]], batch_size=args.batch_size)
    encode_rate = min(5000, len(docs)) / (time.perf_counter() - t0)
    client.indices.forcemerge(index=args.index, max_num_segments=1, request_timeout=600)
    searcher = HybridSearcher(backend, encoder)
    k, depth = args.top_k, args.depth
    # every mode goes through HybridSearcher.search, so every one returns the same thing (the top k
    # with text and metadata: one document fetch each) and they differ only in how they rank
    modes = {
        "bm25": lambda q: searcher.search(q, mode="bm25", top_k=k),
        "knn": lambda q: searcher.search(q, mode="knn", top_k=k),
        "hybrid": lambda q: searcher.search(q, mode="hybrid", fusion="rrf", top_k=k, depth=depth),
        "hybrid-server": lambda q: searcher.search(q, mode="hybrid", fusion="rrf", top_k=k, depth=depth, server_side=True),
        "rerank": lambda q: searcher.search(q, mode="rerank", top_k=k, rerank_depth=depth),
        "rerank-server": lambda q: searcher.search(q, mode="rerank", top_k=k, rerank_depth=depth, server_side=True),
    }
    warm, timed = queries[: args.warmup], queries[args.warmup:]
    for q in warm:
        for run in modes.values():
            run(q)
    times: dict[str, list[float]] = {name: [] for name in modes}
    for q in timed:  # modes interleaved per query, so drift on a shared machine hits them alike
        for name, run in modes.items():
            t = time.perf_counter()
            run(q)
            times[name].append(time.perf_counter() - t)
    latency = {name: {key: summary[key] for key in ("p50_ms", "p99_ms", "mean_ms")}
               for name, summary in ((name, latency_summary(ts)) for name, ts in times.items())}
    base = latency["bm25"]["p50_ms"]

    print(f"\ncorpus: {len(docs)} unique questions from {Path(args.data).name}; {len(timed)} timed queries "
          f"(+{len(warm)} warm-up); model {encoder.model_dir.name} ({encoder.kind}, dim {encoder.dim}); "
          f"top {k}, depth {depth}")
    print(f"ingest: {report.indexed + report.updated} docs in {report.seconds:.1f} s = "
          f"{report.docs_per_second:.0f} docs/s (encode + bulk + refresh; encoding alone {encode_rate:.0f} docs/s); "
          f"failed {len(report.failed)}")
    print(f"{'mode':<15}{'p50 ms':>9}{'p99 ms':>9}{'p50 / bm25':>12}")
    for name, row in latency.items():
        print(f"{name:<15}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['p50_ms'] / base:>11.2f}x")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "command": "python " + " ".join(str(relative_if_path(a)) for a in sys.argv), "docs": len(docs), "queries": len(timed), "top_k": k, "depth": depth,
            "model": repo_relative(encoder.model_dir), "ingest_docs_per_s": report.docs_per_second,
            "encode_docs_per_s": encode_rate, "latency": latency}, indent=2), encoding="utf-8")
    if not args.keep:
        backend.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
