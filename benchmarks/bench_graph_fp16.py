"""An index's vector base graph (float32 vectors) against the same nodes in an HNSW graph that
stores them as float16 (FAISS ``HNSW32,SQfp16``): search time and recall at a size where the
graph no longer fits any cache (issue 24's seventh session measured float16 slower in whole
queries at 124k and 1M; docs/search.md).

1. build: the float16 graph over the base's nodes in node order, from the segments' stored
   vectors 250,000 at a time (efConstruction ``EF_CONSTRUCTION``, two threads), written to
   ``--work``/graph-fp16.faiss and reused when it is there;
2. exact top 10 of ``--n`` queries (the index's model) over the stored vectors, segment by
   segment, once;
3. ``--rounds`` rounds of two child processes, one per graph (the order swapped every other
   round): each loads its graph (2 MB pages asked for both, as the index does), searches each
   query once per pass (``--passes``) at efSearch ``--ef`` (default: the base's), top ``--k``,
   one thread, and prints the p50 and recall@10. The float16 child also times what an index
   would add to each search: its hits' float32 vectors read from the segments and scored.

    python benchmarks/bench_graph_fp16.py IDX-5m --queries queries.txt --work WORKDIR --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from _common import alternating_children, command_line, graph_child_arguments, read_queries
from hybrid_qpr.artifacts import write_json

CHUNK = 250_000
KINDS = ("float32", "float16")


def open_base(index_dir: Path):
    from hybrid_qpr.backends.local import LocalIndex

    index = LocalIndex.open(index_dir)
    if index.base is None or any(seg is None for seg in index.base.segments):
        raise SystemExit(f"{index_dir}: needs a vector base without dead nodes (run 'hybrid-qpr index optimize')")
    return index, index.base


def build(index_dir: Path, path: Path) -> float:
    import faiss

    from hybrid_qpr.backends.local.vectors import EF_CONSTRUCTION, metric_type

    index, base = open_base(index_dir)
    graph = faiss.index_factory(index.dim, "HNSW32,SQfp16", metric_type(index.distance))
    graph.hnsw.efConstruction = EF_CONSTRUCTION
    faiss.omp_set_num_threads(2)
    started = time.perf_counter()
    for seg in base.segments:
        for start in range(0, seg.count, CHUNK):
            graph.add(np.ascontiguousarray(seg.vectors[start:start + CHUNK], dtype=np.float32))
        print(json.dumps({"nodes": int(graph.ntotal), "s": round(time.perf_counter() - started, 1)}), flush=True)
    faiss.write_index(graph, str(path.with_suffix(".tmp")))
    path.with_suffix(".tmp").replace(path)
    return time.perf_counter() - started


def exact_top10(index, base, queries: np.ndarray) -> np.ndarray:
    import faiss

    from hybrid_qpr.backends.local.vectors import metric_type

    metric = metric_type(index.distance)
    best_d = best_i = None
    offset = 0
    for seg in base.segments:
        d, i = faiss.knn(queries, np.ascontiguousarray(seg.vectors, dtype=np.float32), 10, metric)
        i += offset
        offset += seg.count
        if best_d is not None:
            d, i = np.hstack([best_d, d]), np.hstack([best_i, i])
            order = np.argsort(d if metric == faiss.METRIC_L2 else -d, axis=1, kind="stable")[:, :10]
            d, i = np.take_along_axis(d, order, 1), np.take_along_axis(i, order, 1)
        best_d, best_i = d, i
    return best_i


def child(index_dir: Path, queries: list[str], kind: str, work: Path, ef: int | None, k: int, passes: int) -> dict:
    import faiss

    from hybrid_qpr.backends.local import hugepages
    from hybrid_qpr.distance import prepare_vectors
    from hybrid_qpr.encoders import Encoder

    index, base = open_base(index_dir)
    vectors = prepare_vectors(Encoder.load(index.model_dir).encode(queries), index.distance)
    started = time.perf_counter()
    if kind == "float32":
        graph = base.graph()  # read, checked, and its collapse to 2 MB pages started
    else:
        graph = faiss.read_index(str(work / "graph-fp16.faiss"))
        hugepages.back_with_huge_pages(graph)
    load_s = time.perf_counter() - started
    hugepages.settle()
    params = faiss.SearchParametersHNSW()
    params.efSearch = max(k, ef or base.ef_search)
    faiss.omp_set_num_threads(1)
    starts = np.cumsum([0] + [seg.count for seg in base.segments])
    distances = faiss.fvec_L2sqr_ny if graph.metric_type == faiss.METRIC_L2 else faiss.fvec_inner_products_ny
    times, rescore = [], []
    for _ in range(passes):
        for vector in vectors:
            started = time.perf_counter()
            _, hits = graph.search(vector[None], k, params=params)
            times.append(time.perf_counter() - started)
            if kind == "float16":  # the hits' segment rows are found anyway; the gather and the scoring are extra
                nodes = hits[0][hits[0] >= 0]
                owner = np.searchsorted(starts, nodes, side="right") - 1
                parts = [(base.segments[part].vectors, nodes[owner == part] - starts[part]) for part in np.unique(owner)]
                started = time.perf_counter()
                for stored, rows in parts:  # FAISS's own distance kernel, as an exact index scores
                    gathered = np.ascontiguousarray(stored[rows])
                    out = np.empty(len(rows), dtype=np.float32)
                    distances(faiss.swig_ptr(out), faiss.swig_ptr(vector), faiss.swig_ptr(gathered), gathered.shape[1],
                              len(rows))
                rescore.append(time.perf_counter() - started)
    _, found = graph.search(vectors, 10, params=params)
    if kind == "float32" and base.order is not None:  # the base's graph stores its nodes in locality order
        found = base.order[found]
    exact = np.load(work / "exact-top10.npy")
    recall = float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact)]))
    return {"kind": kind, "p50_us": statistics.median(times) * 1e6, "ef_search": int(params.efSearch),
            "recall_at_10": recall, "rescore_p50_us": statistics.median(rescore) * 1e6 if rescore else None,
            "load_s": round(load_s, 1), "nodes": int(graph.ntotal)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a local index directory with a vector base")
    parser.add_argument("--work", type=Path, required=True, help="folder for the float16 graph and the exact lists")
    parser.add_argument("--ef", type=int, help="efSearch (default: the base's)")
    graph_child_arguments(parser, KINDS)
    args = parser.parse_args()
    queries = read_queries(args.queries, args.n, seed=0)
    if args.child:
        print(json.dumps(child(args.index, queries, args.child, args.work, args.ef, args.k, args.passes)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    build_s = None
    if not (args.work / "graph-fp16.faiss").exists():
        build_s = build(args.index, args.work / "graph-fp16.faiss")
    if not (args.work / "exact-top10.npy").exists():
        from hybrid_qpr.distance import prepare_vectors
        from hybrid_qpr.encoders import Encoder

        index, base = open_base(args.index)
        vectors = prepare_vectors(Encoder.load(index.model_dir).encode(queries), index.distance)
        np.save(args.work / "exact-top10.npy", exact_top10(index, base, vectors))

    def commands(kind: str) -> list[list[str]]:
        return [[__file__, str(args.index), "--queries", str(args.queries), "--work", str(args.work), "--n", str(args.n),
                 "--k", str(args.k), "--passes", str(args.passes), "--child", kind]
                + (["--ef", str(args.ef)] if args.ef else [])]

    runs = []
    for _, _, _, result in alternating_children(commands, KINDS, args.rounds):
        runs.append(result)
        print(json.dumps(result), flush=True)
    summary = {kind: statistics.median(r["p50_us"] for r in runs if r["kind"] == kind) for kind in KINDS}
    print("median of the rounds' p50 (us):", {kind: round(v, 1) for kind, v in summary.items()})
    if args.out:
        write_json(args.out, {"command": command_line(), "build_s": build_s, "runs": runs, "median_p50_us": summary})


if __name__ == "__main__":
    main()
