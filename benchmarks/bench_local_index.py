"""Benchmark of the embedded index on every question of a Quora-layout pairs file.

Measures (each printed as a table and saved as JSON):

1. ingest: wall time of ``LocalIndex.ingest`` over all distinct questions (encode + SQLite +
   FAISS + bm25s), the same work as ``hybrid-qpr ingest PAIRS --index DIR``;
2. latency per mode: p50/p95/p99 ms and queries/s of ``HybridSearcher.search`` one query at
   a time (encoding included), for bm25, knn, hybrid and rerank;
3. BM25 implementations: queries/s of bm25s vs rank-bm25 (rank-bm25 scores every document
   per query, so it runs on ``--rank-bm25-queries`` queries only);
4. FAISS: Flat vs IVF{4 sqrt N},Flat (nprobe 10) vs HNSW32 over the index's vectors:
   build seconds, recall@10 against Flat, p50 ms per single-vector search.

Usage (timings depend on the machine; say if it was loaded):
    nice -n 10 python benchmarks/bench_local_index.py /work/shared/data/quora-pairs.tsv.gz \
        --index /tmp/bench/quora-idx --out benchmarks/results/engine-quora.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np

from hybrid_qpr.backends.local import LocalIndex, build_faiss, faiss_factory
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.encoders import Encoder
from _common import repo_relative
from hybrid_qpr.evaluation.evaluator import latency_summary
from hybrid_qpr.search import HybridSearcher


def bench_ingest(pairs: str, index_dir: Path, encoder) -> dict:
    if index_dir.exists():
        shutil.rmtree(index_dir)
    docs = list(iter_documents(pairs))
    start = time.perf_counter()
    index = LocalIndex.create(index_dir, encoder)
    report = index.ingest(docs, encoder, show_progress=False)
    seconds = time.perf_counter() - start
    return {"documents": index.count(), "seconds": seconds, "docs_per_s": index.count() / seconds,
            "factory": index.manifest["faiss"]["factory"], "indexed": report.indexed}


def bench_modes(searcher, queries: list[str]) -> dict:
    out = {}
    for mode in ("bm25", "knn", "hybrid", "rerank"):
        searcher.search(queries[0], mode=mode)  # warm-up
        times = []
        for q in queries:
            start = time.perf_counter()
            searcher.search(q, mode=mode, top_k=10)
            times.append(time.perf_counter() - start)
        out[mode] = latency_summary(times)
    start = time.perf_counter()
    searcher.encoder.encode(queries[:200])
    out["encode_batch_ms_per_query"] = (time.perf_counter() - start) * 1000 / min(200, len(queries))
    times = []
    for q in queries[:500]:
        start = time.perf_counter()
        searcher.encoder.encode([q])
        times.append(time.perf_counter() - start)
    out["encode_single"] = latency_summary(times)
    return out


def bench_search_only(searcher, queries: list[str]) -> dict:
    """Per-mode latency with the query vectors encoded beforehand: the engine's own cost."""
    vectors = searcher.encoder.encode(queries)
    out = {}
    for mode in ("knn", "hybrid", "rerank"):
        searcher.search(queries[0], mode=mode, vector=vectors[0])
        times = []
        for q, v in zip(queries, vectors):
            start = time.perf_counter()
            searcher.search(q, mode=mode, top_k=10, vector=v)
            times.append(time.perf_counter() - start)
        out[mode] = latency_summary(times)
    return out


def bench_bm25(index_dir: Path, queries: list[str], rank_queries: int) -> dict:
    out = {}
    for impl, n in (("bm25s", len(queries)), ("rank-bm25", rank_queries)):
        start = time.perf_counter()
        index = LocalIndex.open(index_dir, bm25=impl)
        load = time.perf_counter() - start
        times = []
        for q in queries[:n]:
            start = time.perf_counter()
            index.bm25(q, 10)
            times.append(time.perf_counter() - start)
        out[impl] = {"queries": n, "open_seconds": load, **latency_summary(times)}
    return out


def bench_faiss(index_dir: Path, distance: str, n_queries: int, seed: int) -> dict:
    vectors = np.load(index_dir / "vectors.npy")
    rng = np.random.default_rng(seed)
    query_rows = rng.choice(len(vectors), size=min(n_queries, len(vectors)), replace=False)
    queries = np.ascontiguousarray(vectors[query_rows])
    results, truth = {}, None
    for kind in ("flat", "ivf", "hnsw"):
        factory = faiss_factory(len(vectors), kind)
        start = time.perf_counter()
        index = build_faiss(vectors, distance, factory)
        build = time.perf_counter() - start
        if truth is None:
            truth = index.search(queries, 10)[1]
        recall, times = recall_and_latency(index, queries, truth)
        results[factory] = {"build_seconds": build, "recall@10_vs_flat": recall, **latency_summary(times)}
    return results


def recall_and_latency(index, queries: np.ndarray, truth: np.ndarray) -> tuple[float, list[float]]:
    """Recall@10 of a FAISS index against the exact top-10 ``truth``, and one-query search times."""
    _, found = index.search(queries, 10)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)]))
    times = []
    for q in queries:
        start = time.perf_counter()
        index.search(q[None], 10)
        times.append(time.perf_counter() - start)
    return recall, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", help="Quora-layout pairs file (all distinct questions are indexed)")
    parser.add_argument("--index", required=True, type=Path, help="index directory to (re)build")
    parser.add_argument("--model", default=None, help="encoder directory [default: the committed model]")
    parser.add_argument("--queries", type=int, default=2000, help="questions sampled as queries")
    parser.add_argument("--rank-bm25-queries", type=int, default=20)
    parser.add_argument("--skip-ingest", action="store_true", help="reuse an index built before")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime threads [default: onnxruntime's]")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--steps", default="modes,search-only,bm25,faiss",
                        help="comma-separated steps after ingest: modes, search-only (vectors encoded beforehand), bm25, faiss")
    args = parser.parse_args()

    encoder = Encoder.load(args.model, threads=args.threads)
    result: dict = {"pairs": repo_relative(args.pairs), "model": repo_relative(encoder.model_dir), "fingerprint": encoder.fingerprint,
                    "dim": encoder.dim, "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()}
    if not args.skip_ingest:
        result["ingest"] = bench_ingest(args.pairs, args.index, encoder)
        print("ingest", json.dumps(result["ingest"]), flush=True)
    index = LocalIndex.open(args.index)
    texts = [doc.text for _, doc in iter_documents(args.pairs)]
    queries = random.Random(args.seed).sample(texts, min(args.queries, len(texts)))
    searcher = HybridSearcher(index, encoder)
    steps = set(args.steps.split(","))
    if "modes" in steps:
        result["modes"] = bench_modes(searcher, queries)
        print("modes", json.dumps(result["modes"]), flush=True)
    if "search-only" in steps:
        result["search_only"] = bench_search_only(searcher, queries)
        print("search-only", json.dumps(result["search_only"]), flush=True)
    if "bm25" in steps:
        result["bm25"] = bench_bm25(args.index, queries, args.rank_bm25_queries)
        print("bm25", json.dumps(result["bm25"]), flush=True)
    if "faiss" in steps:
        result["faiss"] = bench_faiss(args.index, index.distance, min(args.queries, 1000), args.seed)
        print("faiss", json.dumps(result["faiss"]), flush=True)
    result["load_average_at_end"] = os.getloadavg()
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
