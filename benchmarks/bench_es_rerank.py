"""Two ways to score the MSEM rerank candidates on Elasticsearch without painless, timed on an
existing index (docs/elasticsearch.md): read the candidates' stored vectors with ``_mget`` and
score them in Python, or a ``knn`` search filtered to their ids (what the backend does).

Example (an index built by 'hybrid-qpr ingest data/quora/beir/corpus.jsonl --elasticsearch --index quora-cnn')::

    python benchmarks/bench_es_rerank.py --url http://127.0.0.1:9201 --index quora-cnn --queries 120
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from _common import DEFAULT_DATA, load_pairs_slice


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None)
    parser.add_argument("--index", required=True)
    parser.add_argument("--queries", type=int, default=120)
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--data", default=DEFAULT_DATA)
    args = parser.parse_args(argv)

    from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend, connect
    from hybrid_qpr.distance import prepare_vectors, similarity
    from hybrid_qpr.encoders import Encoder

    encoder = Encoder.load(None)
    backend = ElasticsearchBackend(connect(args.url), args.index)
    _, queries = load_pairs_slice(args.data, 20000, args.queries, 13)

    def via_mget(vector, ids):
        response = backend.request("POST", f"/{args.index}/_mget", {"ids": ids},
                                   {"_source_includes": "embedding"}, what="reading vectors")
        found = [(d["_id"], d["_source"]["embedding"]) for d in response["docs"] if d.get("found")]
        query = prepare_vectors(np.asarray(vector, dtype=np.float32).reshape(1, -1), backend.distance)
        scores = similarity(query, np.asarray([v for _, v in found], dtype=np.float32), backend.distance)[0]
        return {doc_id: float(s) for (doc_id, _), s in zip(found, scores)}

    times: dict[str, list[float]] = {"_mget + client scoring": [], "knn filtered to the ids": []}
    worst = 0.0
    for text, _ in queries:
        vector = encoder.encode([text])[0]
        ids = [h.id for h in backend.bm25(text, args.depth)]
        t = time.perf_counter()
        a = via_mget(vector, ids)
        times["_mget + client scoring"].append(time.perf_counter() - t)
        t = time.perf_counter()
        b = backend.vector_scores(vector, ids)
        times["knn filtered to the ids"].append(time.perf_counter() - t)
        assert set(a) == set(b), "the two ways found different documents"
        worst = max([worst] + [abs(a[i] - b[i]) for i in a])
    for name, ts in times.items():
        print(f"{name:<26} p50 {1000 * float(np.median(ts)):.2f} ms")
    print(f"largest score difference {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
