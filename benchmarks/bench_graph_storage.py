"""How an HNSW graph stores its vectors: float32 (``HNSW32``, the vector base's), float16
(``HNSW32,SQfp16``) and 8-bit (``HNSW32,SQ8``), on one index's stored vectors (issue 24's
seventh session tried float16 for the vector base; docs/search.md says why it was not kept).

Builds the three graphs (efConstruction ``EF_CONSTRUCTION``, two threads) over the vectors of
the index's segments, encodes ``--n`` queries with the index's model, and for each ``--ef``
times one search per query (one thread, top ``--k``), the three graphs alternating query by
query over ``--passes`` passes; then recall@10 and top 1 against exact search. Prints a table
and writes ``--out``.

    python benchmarks/bench_graph_storage.py IDX-124k --queries queries.txt --out OUT.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from _common import command_line, graph_query_arguments, read_queries
from hybrid_qpr.artifacts import write_json

KINDS = {"float32": "HNSW32", "float16": "HNSW32,SQfp16", "8-bit": "HNSW32,SQ8"}


def main() -> None:
    import faiss

    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.backends.local.vectors import EF_CONSTRUCTION, metric_type
    from hybrid_qpr.distance import prepare_vectors
    from hybrid_qpr.encoders import Encoder

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a local index directory")
    graph_query_arguments(parser)
    parser.add_argument("--ef", type=int, nargs="+", default=[32, 48, 64, 96], help="efSearch values")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the queries")
    parser.add_argument("--out", type=Path, required=True, help="JSON results")
    args = parser.parse_args()

    index = LocalIndex.open(args.index)
    vectors = np.ascontiguousarray(np.concatenate([np.asarray(s.vectors) for s in index.segments]), dtype=np.float32)
    queries = prepare_vectors(Encoder.load(index.model_dir).encode(read_queries(args.queries, args.n, seed=0)),
                              index.distance)
    metric = metric_type(index.distance)
    faiss.omp_set_num_threads(2)
    graphs, built = {}, {}
    for name, factory in KINDS.items():
        started = time.perf_counter()
        graph = faiss.index_factory(vectors.shape[1], factory, metric)
        graph.hnsw.efConstruction = EF_CONSTRUCTION
        graph.train(vectors)
        graph.add(vectors)
        graphs[name], built[name] = graph, round(time.perf_counter() - started, 1)
        print(f"{name}: built in {built[name]} s", flush=True)
    faiss.omp_set_num_threads(1)
    _, exact = faiss.knn(queries, vectors, 10, metric)
    rows = []
    for ef in args.ef:
        times: dict[str, list[float]] = {name: [] for name in graphs}
        for name in graphs:
            graphs[name].hnsw.efSearch = ef
        for run in range(args.passes):
            for i in range(len(queries)):
                order = list(graphs) if (i + run) % 2 else list(reversed(graphs))
                for name in order:
                    started = time.perf_counter()
                    graphs[name].search(queries[i:i + 1], args.k)
                    times[name].append(time.perf_counter() - started)
        for name, graph in graphs.items():
            _, found = graph.search(queries, 10)
            recall = float(np.mean([len(set(found[j]) & set(exact[j])) / 10 for j in range(len(queries))]))
            row = {"ef_search": ef, "storage": name, "p50_us": round(statistics.median(times[name]) * 1e6, 1),
                   "recall_at_10": round(recall, 4), "top1": round(float(np.mean(found[:, 0] == exact[:, 0])), 4)}
            rows.append(row)
            print(f"efSearch {ef} {name:8s} p50 {row['p50_us']:7.1f} us  recall@10 {row['recall_at_10']:.4f}  "
                  f"top1 {row['top1']:.4f}", flush=True)
    write_json(args.out, {"command": command_line(), "vectors": len(vectors), "dim": int(vectors.shape[1]),
                          "k": args.k, "queries": len(queries), "build_s": built, "rows": rows})


if __name__ == "__main__":
    main()
