"""The HNSW graph search of a local index on 4 KB pages against 2 MB pages (``hugepages.py``).

Each round runs two child processes one after the other, one per page size (the order swapped
every other round): each opens the index, encodes ``--n`` queries with the index's model, and
times one search per query of the vector base (one thread, top ``--k``, its calibrated
efSearch), ``--passes`` times over the queries; it prints the median. ``4k`` keeps FAISS's heap
pages (``back_with_huge_pages`` is skipped); ``2m`` waits for the collapse first. The searches
alone, without encoding, BM25 or Python around them: ``bench_latency.py`` measures the queries.

    python benchmarks/bench_graph_pages.py IDX-124k IDX-1m --queries queries.txt --rounds 3 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import alternating_children, command_line, graph_child_arguments, read_queries

PAGES = ("4k", "2m")


def child(index_dir: Path, queries: list[str], pages: str, k: int, passes: int) -> dict:
    import faiss

    from hybrid_qpr.backends.local import hugepages, segment, vectorbase
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.distance import prepare_vectors
    from hybrid_qpr.encoders import Encoder

    if pages == "4k":
        segment.back_with_huge_pages = vectorbase.back_with_huge_pages = lambda index: False
    index = LocalIndex.open(index_dir)
    if index.base is None:
        raise SystemExit(f"{index_dir}: no vector base (one HNSW graph over the segments) to search")
    vectors = prepare_vectors(Encoder.load(index.model_dir).encode(queries), index.distance)
    base = index.base
    graph = base.graph()  # read now (and the collapse started)
    hugepages.settle()
    params = faiss.SearchParametersHNSW()
    params.efSearch = max(k, base.ef_search)
    faiss.omp_set_num_threads(1)
    times = []
    for _ in range(passes):
        for vector in vectors:
            start = time.perf_counter()
            graph.search(vector[None], k, params=params)
            times.append(time.perf_counter() - start)
    huge_kb = next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages"))
    return {"pages": pages, "p50_us": statistics.median(times) * 1e6, "ef_search": int(params.efSearch),
            "vectors": int(graph.ntotal), "anon_huge_pages_mb": huge_kb // 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("indexes", type=Path, nargs="+", help="local index directories with a vector base")
    graph_child_arguments(parser, PAGES)
    args = parser.parse_args()
    queries = read_queries(args.queries, args.n, seed=0)
    if args.child:
        print(json.dumps(child(args.indexes[0], queries, args.child, args.k, args.passes)))
        return

    def commands(pages: str) -> list[list[str]]:
        return [[__file__, str(index), "--queries", str(args.queries), "--n", str(args.n), "--k", str(args.k),
                 "--passes", str(args.passes), "--child", pages] for index in args.indexes]

    runs = []
    for round_number, _, position, result in alternating_children(commands, PAGES, args.rounds):
        run = {"round": round_number, "index": args.indexes[position].name, **result}
        runs.append(run)
        print(json.dumps(run), flush=True)
    for index in args.indexes:
        medians = {p: statistics.median(r["p50_us"] for r in runs if r["index"] == index.name and r["pages"] == p)
                   for p in PAGES}
        print(f"{index.name}: graph search p50, median of {args.rounds} rounds: 4 KB pages {medians['4k']:.1f} us, "
              f"2 MB pages {medians['2m']:.1f} us")
    if args.out:
        args.out.write_text(json.dumps({"command": command_line(), "runs": runs}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
