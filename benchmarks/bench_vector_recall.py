"""Recall against exact search, and latency, of the vector indexes the local index can use.

Reads the live vectors of a local index directory (every segment, in manifest order), takes
the first ``--sizes`` of them (a size above the vectors held is skipped), encodes the query
texts with the index's model, and for each size measures against exact ``Flat`` search:

* ``HNSW{M}`` (``--hnsw-m``) at each ``--ef`` (FAISS ``efSearch``);
* ``IVF{round(4 sqrt N)},Flat`` at each ``--nprobe``;
* ``Flat`` itself (latency only).

For each: build seconds, recall@10 of a top-10 search (the ``knn`` mode), recall@10 and
recall@100 of a top-100 search (the lists ``hybrid`` fuses), p50 ms of one single-query
search at k 10 and at k 100. Results are printed as JSON lines and written to ``--out``.

``--engine`` measures the index as it is instead (its segments, their FAISS parts and the
stored search settings, through ``LocalIndex.knn``) against exact search over all its live
vectors, at each ``--ef`` and at the stored default: the recall a user of that index gets, and
``top1_agreement``, the share of queries whose exact best document comes back first (with
queries that are not stored documents, the figure a paraphrase search lives on).

    python benchmarks/bench_vector_recall.py /tmp/lp/quora-idx --queries /work/data/quora/beir/queries.jsonl \
        --sizes 10000 123725 --out benchmarks/results/vector-recall-quora.json
    python benchmarks/bench_vector_recall.py /work/data/seg-bench/idx-merged \
        --queries /work/data/seg-bench/queries.txt --sizes 1000000 --out benchmarks/results/vector-recall-1m.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from _common import read_queries, repo_relative
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.segment import BASE_FACTORY
from hybrid_qpr.backends.local.vectors import build_faiss, calibrate_ef
from hybrid_qpr.distance import prepare_vectors
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import latency_summary


def live_vectors(index: LocalIndex, limit: int) -> np.ndarray:
    parts, held = [], 0
    for seg in index.segments:
        rows = np.arange(seg.count) if seg.deleted is None else np.flatnonzero(~seg.deleted)
        rows = rows[:max(0, limit - held)]
        parts.append(np.asarray(seg.vectors[rows], dtype=np.float32))
        held += len(rows)
        if held >= limit:
            break
    return np.ascontiguousarray(np.concatenate(parts))


def recall(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(found, truth)]))


def single_query_ms(index, queries: np.ndarray, k: int) -> dict:
    times = []
    for q in queries:
        start = time.perf_counter()
        index.search(q[None], k)
        times.append(time.perf_counter() - start)
    return latency_summary(times)["p50_ms"]


def measure(faiss_index, queries: np.ndarray, truth: np.ndarray, build_s: float, **settings) -> dict:
    _, top10 = faiss_index.search(queries, 10)
    _, top100 = faiss_index.search(queries, 100)
    return {**settings, "build_s": round(build_s, 2), "recall@10_k10": recall(top10, truth, 10),
            "recall@10_k100": recall(top100, truth, 10), "recall@100_k100": recall(top100, truth, 100),
            "p50_ms_k10": single_query_ms(faiss_index, queries, 10), "p50_ms_k100": single_query_ms(faiss_index, queries, 100)}


def engine_recall(index: LocalIndex, queries: np.ndarray, efs: list[int], calibrate: bool = False) -> list[dict]:
    """Recall of ``LocalIndex.knn`` (the index as built) against exact search over its live vectors.
    ``calibrate``: first run ``calibrate_ef`` on each HNSW segment (an index built before
    calibration) and measure the largest value it chooses as the default."""
    vectors = live_vectors(index, index.count())
    flat = build_faiss(vectors, index.distance, "Flat")
    _, truth = flat.search(queries, 100)
    del flat, vectors
    ids = [h for seg in index.segments
           for h in seg.ids_at(np.arange(seg.count) if seg.deleted is None else np.flatnonzero(~seg.deleted))]
    truth_ids = [[ids[r] for r in row] for row in truth]
    default = index.search_settings.ef_search  # None: each segment's calibrated efSearch
    # segments in the vector base have no graph of their own: the base's efSearch stands for them
    graphs = [seg for seg in index.segments if seg.entry["factory"] != BASE_FACTORY and hasattr(seg.faiss, "hnsw")]
    calibrated = [seg.ef_search for seg in graphs] + ([index.base.ef_search] if index.base else [])
    if calibrate:  # segments built before calibration: what calibrate_ef would choose for them
        calibrated = [calibrate_ef(seg.faiss, np.ascontiguousarray(seg.vectors, dtype=np.float32), index.distance)
                      for seg in graphs]
        print(json.dumps({"calibrated_ef_search": calibrated}), flush=True)
    rows = []
    settings = [(default, True)] if not calibrate else [(max(calibrated, default=default), True)]
    settings += [(ef, False) for ef in efs if ef != settings[0][0]]
    for ef, is_default in settings:
        if ef is not None:
            index.set_search_settings(ef_search=ef)
        found10 = [[h.id for h in index.knn(q, 10)] for q in queries]
        found100 = [[h.id for h in index.knn(q, 100)] for q in queries]
        rows.append({"ef_search": ef if ef is not None else f"calibrated {calibrated}", "default": is_default,
                     "segments": len(index.segments),
                     "recall@10_k10": recall(found10, truth_ids, 10), "recall@10_k100": recall(found100, truth_ids, 10),
                     "recall@100_k100": recall(found100, truth_ids, 100),
                     "top1_agreement": float(np.mean([f[:1] == t[:1] for f, t in zip(found10, truth_ids)])),
                     "knn_p50_ms_k10": single_knn_ms(index, queries, 10),
                     "knn_p50_ms_k100": single_knn_ms(index, queries, 100)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def single_knn_ms(index: LocalIndex, queries: np.ndarray, k: int) -> float:
    times = []
    for q in queries:
        start = time.perf_counter()
        index.knn(q, k)
        times.append(time.perf_counter() - start)
    return latency_summary(times)["p50_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="local index directory (its vectors and model are used)")
    parser.add_argument("--queries", type=Path, required=True, help="query texts: .jsonl (text field) or one per line")
    parser.add_argument("--n-queries", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=[])
    parser.add_argument("--engine", action="store_true", help="measure the index as built (see above)")
    parser.add_argument("--calibrate", action="store_true",
                        help="with --engine: calibrate the segments' efSearch first (indexes built before calibration)")
    parser.add_argument("--hnsw-m", type=int, nargs="+", default=[32])
    parser.add_argument("--ef", type=int, nargs="+", default=[16, 32, 64, 96, 128, 192, 256])
    parser.add_argument("--nprobe", type=int, nargs="+", default=[10, 32, 64, 128, 256])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--threads", type=int, default=1,
                        help="FAISS (OpenMP) threads for builds and searches [1: what the local index searches with]")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(args.threads)

    index = LocalIndex.open(args.index)
    encoder = Encoder.load(index.model_dir)
    texts = read_queries(args.queries, args.n_queries, args.seed)
    queries = prepare_vectors(encoder.encode(texts, show_progress=False), index.distance)
    result = {"index": repo_relative(args.index), "model": repo_relative(encoder.model_dir), "distance": index.distance,
              "queries": len(queries), "cpus": os.cpu_count(), "faiss_threads": args.threads,
              "load_average_at_start": os.getloadavg(), "sizes": {}}
    if args.engine:
        result["engine"] = {"documents": index.count(), "factories": sorted({s.entry["factory"] for s in index.segments}),
                            "rows": engine_recall(index, queries, args.ef, args.calibrate)}
    everything = live_vectors(index, max(args.sizes, default=0)) if args.sizes else np.zeros((0, 0), np.float32)
    for size in args.sizes:
        if size > len(everything):
            print(f"skipping size {size}: the index holds {len(everything)} vectors", flush=True)
            continue
        vectors = everything[:size]
        rows = []
        start = time.perf_counter()
        flat = build_faiss(vectors, index.distance, "Flat")
        build = time.perf_counter() - start
        _, truth = flat.search(queries, 100)
        flat_row = {"index": "Flat", "build_s": round(build, 2), "recall@10_k10": 1.0,
                    "p50_ms_k10": single_query_ms(flat, queries[:100], 10),
                    "p50_ms_k100": single_query_ms(flat, queries[:100], 100)}
        rows.append(flat_row)
        print(size, json.dumps(flat_row), flush=True)
        for m in args.hnsw_m:
            start = time.perf_counter()
            hnsw = build_faiss(vectors, index.distance, f"HNSW{m}")
            build = time.perf_counter() - start
            for ef in args.ef:
                hnsw.hnsw.efSearch = ef
                rows.append(measure(hnsw, queries, truth, build, index=f"HNSW{m}", ef_search=ef))
                print(size, json.dumps(rows[-1]), flush=True)
            del hnsw
        nlist = max(1, round(4 * np.sqrt(size)))
        start = time.perf_counter()
        ivf = build_faiss(vectors, index.distance, f"IVF{nlist},Flat")
        build = time.perf_counter() - start
        for nprobe in args.nprobe:
            ivf.nprobe = nprobe
            rows.append(measure(ivf, queries, truth, build, index=f"IVF{nlist},Flat", nprobe=nprobe))
            print(size, json.dumps(rows[-1]), flush=True)
        del ivf
        result["sizes"][str(size)] = rows
    result["load_average_at_end"] = os.getloadavg()
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
