"""Graph search time with the vector base's nodes stored in ingest order against locality order
(``hybrid_qpr.backends.local.locality``: nested k-means cells, issue 24's ninth session).

One process holds both copies of the index's graph (the same edges, renumbered; memory: twice
the graph, three times for an index already in locality order), each backed by 2 MB pages as a
reader's is, and searches them alternately, query by query, each side on
other queries than the other at that moment (so neither finds the other's walk in the CPU
caches), one thread, top ``--k`` at the index's efSearch. It checks that both return the same
nodes for every query, and prints the p50 of each and the time the order took to compute::

    python benchmarks/bench_graph_order.py IDX --queries queries.txt --rounds 6 --out graph-order.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from _common import command_line, graph_query_arguments, read_queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="local index directory with a vector base")
    graph_query_arguments(parser)
    parser.add_argument("--rounds", type=int, default=6, help="passes over the queries")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the run is appended to")
    args = parser.parse_args()

    import faiss

    from hybrid_qpr.backends.local import LocalIndex, hugepages
    from hybrid_qpr.backends.local.locality import locality_order
    from hybrid_qpr.distance import prepare_vectors
    from hybrid_qpr.encoders import Encoder

    index = LocalIndex.open(args.index)
    base = index.base
    if base is None:
        raise SystemExit(f"{args.index}: no vector base (one HNSW graph over the segments) to search")
    queries = prepare_vectors(Encoder.load(index.model_dir).encode(read_queries(args.queries, args.n, seed=0)),
                              index.distance)
    stored, stored_order = base.graph(), base.order  # read, and backed by 2 MB pages
    by_node = stored  # entry j = node j: the graph as written before the order was kept
    if stored_order is not None:
        by_node = faiss.clone_index(stored)
        by_node.permute_entries(np.argsort(stored_order).astype(np.int64))
    nodes = faiss.rev_swig_ptr(faiss.downcast_index(by_node.storage).get_xb(), by_node.ntotal * by_node.d)
    started = time.perf_counter()
    order = locality_order(nodes.reshape(by_node.ntotal, by_node.d))
    order_s = time.perf_counter() - started
    if order is None:
        raise SystemExit(f"{args.index}: too few nodes for a locality order")
    by_cell = faiss.clone_index(by_node)
    by_cell.permute_entries(order)
    graphs = {"ingest order": (by_node, None), "locality order": (by_cell, order)}
    for graph, _ in graphs.values():
        if graph is not stored:
            hugepages.back_with_huge_pages(graph)
    hugepages.settle()
    params = faiss.SearchParametersHNSW()
    params.efSearch = max(args.k, base.ef_search)
    faiss.omp_set_num_threads(1)

    def found(name: str) -> np.ndarray:
        graph, entries = graphs[name]
        labels = graph.search(queries, args.k, params=params)[1]
        return labels if entries is None else np.where(labels >= 0, entries[labels], -1)

    same = float(np.mean([set(a) == set(b) for a, b in zip(found("ingest order"), found("locality order"))]))
    times: dict[str, list[float]] = {name: [] for name in graphs}
    names = list(graphs)
    for round_ in range(args.rounds):
        for i in range(len(queries)):
            for j in range(2):
                name = names[(i + round_ + j) % 2]
                graph = graphs[name][0]
                vector = queries[(i + 37 * j + 11 * round_) % len(queries)][None]
                start = time.perf_counter()
                graph.search(vector, args.k, params=params)
                times[name].append(time.perf_counter() - start)
    result = {"index": args.index.name, "nodes": int(by_node.ntotal), "ef_search": int(params.efSearch), "k": args.k,
              "queries": len(queries), "rounds": args.rounds, "order_s": round(order_s, 2), "same_lists": same,
              **{f"{name} p50_us": round(statistics.median(t) * 1e6, 1) for name, t in times.items()}}
    print(json.dumps(result))
    runs = json.loads(args.out.read_text(encoding="utf-8"))["runs"] if args.out.exists() else []
    args.out.write_text(json.dumps({"command": command_line(), "runs": [*runs, result]}, indent=1) + "\n",
                        encoding="utf-8")


if __name__ == "__main__":
    main()
