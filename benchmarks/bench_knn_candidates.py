"""kNN MRR@20 of a backend's index on Quora test queries at several HNSW candidate counts
(OpenSearch ``k``, Elasticsearch ``num_candidates``: the backend's ``knn_candidates``), against the exact
embedded index - the measurement behind the OpenSearch kNN gap in README.md.

Example::

    python benchmarks/bench_knn_candidates.py --beir data/quora/beir --exact IDX_FLAT \\
        --opensearch http://127.0.0.1:9200 --elasticsearch http://127.0.0.1:9201 --index quora-cnn --queries 400
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", required=True)
    parser.add_argument("--exact", required=True, help="embedded index built with --faiss flat over the same corpus")
    parser.add_argument("--opensearch", default=None)
    parser.add_argument("--elasticsearch", default=None)
    parser.add_argument("--index", required=True, help="cluster index name")
    parser.add_argument("--queries", type=int, default=400, help="first N of the seeded 2,000-query test sample")
    parser.add_argument("--candidates", default="100,300,1000")
    args = parser.parse_args(argv)

    import hybrid_qpr.backends.elasticsearch as es
    import hybrid_qpr.backends.opensearch as opensearch
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import drop_self, sample_queries, score_run

    _, queries, qrels = load_beir(args.beir, "test")
    sample = sample_queries(queries, qrels, 2000)
    qids = list(sample)[: args.queries]
    encoder = Encoder.load(None)
    vectors = encoder.encode([sample[q] for q in qids])

    def mrr(backend) -> float:
        run = {q: [h.id for h in backend.knn(v, 20)] for q, v in zip(qids, vectors)}
        return score_run(drop_self(run), qrels)["MRR@20"]

    print(f"exact (embedded Flat): kNN MRR@20 {mrr(LocalIndex.open(args.exact)):.4f} on {len(qids)} queries")
    backends = []
    if args.opensearch:
        backends.append(("opensearch", opensearch.OpenSearchBackend(opensearch.connect(args.opensearch), args.index)))
    if args.elasticsearch:
        backends.append(("elasticsearch", es.ElasticsearchBackend(es.connect(args.elasticsearch), args.index)))
    for name, backend in backends:
        for k in (int(c) for c in args.candidates.split(",")):
            backend.knn_candidates = k
            print(f"{name}: candidates {k}: kNN MRR@20 {mrr(backend):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
