"""Where the time of one embedded query goes, and how our BM25 compares with bm25s', in one run.

Over one local index and one set of query texts (``--queries``, ``--n`` sampled, seed 13),
one query at a time, each step timed as wall time and as the calling thread's CPU time
(``time.thread_time``: on a shared machine the CPU time is the steadier figure; the wall
p50 is what a user waits). Steps:

* ``encode``                   the query encoded (1 text)
* ``bm25 list``                ``LocalIndex.bm25(q, depth)``: the compiled scorer (numba)
* ``bm25 list, exhaustive``     the same list from the compiled pass over every posting (the
                               scorer before block-max pruning, issue 24; ``blockmax.PRUNE_MAX_TOKENS`` 0)
* ``bm25 list, numpy``         the same list from ``score_segments`` + selection over every
                               document (the path without numba, and the code before it)
* ``bm25s numba`` / ``bm25s numpy``  the bm25s library over the same documents and the same
                               tokens (ours: ``hybrid_qpr.text.tokenize``, no stop words),
                               ``retrieve(k=depth)`` on one thread
* ``vector index``             FAISS search of every segment, nothing else
* ``knn list``                 ``LocalIndex.knn(v, depth)`` (FAISS + tombstones + ids)
* ``fetch 10``                 ``LocalIndex.documents`` of 10 ids (SQLite)
* ``fusion``                   RRF of the two lists (``HybridSearcher.fuse``)
* ``bm25 | knn | hybrid``      ``HybridSearcher.search`` end to end, encoding included (hybrid at
                               ``--depth``, the lists' depth)
* ``hybrid, one thread``       hybrid with the two lists one after the other

    python benchmarks/bench_query_parts.py /tmp/lp/quora-hnsw --queries /work/data/quora/beir/queries.jsonl \
        --corpus /work/data/quora/beir/corpus.jsonl --out benchmarks/results/query-parts-quora.json
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np

from _common import index_query_parser, read_queries, repo_relative
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.backends.local import LocalIndex, blockmax
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.ranking import Candidates as SegmentRows
from hybrid_qpr.backends.local.ranking import entry_hits, ranked_entries
from hybrid_qpr.backends.local.vectorbase import knn_units
from hybrid_qpr.backends.local.vectors import one_thread
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.distance import prepare_vectors
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.search import DEFAULT_DEPTH, Candidates, HybridSearcher
from hybrid_qpr.text import tokenize


def timed(call, n: int, rounds: int) -> dict:
    """p50/p95 wall and CPU ms of ``call(i)`` for i in range(n), best round of ``rounds``
    (rounds alternate with the other steps' rounds, so a burst of load hits all steps)."""
    best = None
    for _ in range(rounds):
        wall, cpu = [], []
        for i in range(n):
            w, c = time.perf_counter(), time.thread_time()
            call(i)
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - w)
        row = {"wall_p50_ms": float(np.percentile(wall, 50) * 1e3), "wall_p95_ms": float(np.percentile(wall, 95) * 1e3),
               "cpu_p50_ms": float(np.percentile(cpu, 50) * 1e3), "cpu_p95_ms": float(np.percentile(cpu, 95) * 1e3)}
        if best is None or row["wall_p50_ms"] < best["wall_p50_ms"]:
            best = row
    return best


def exhaustive_bm25(index: LocalIndex, query: str, depth: int):
    saved, blockmax.PRUNE_MAX_TOKENS = blockmax.PRUNE_MAX_TOKENS, 0  # every query scored without pruning
    try:
        return index.bm25(query, depth)
    finally:
        blockmax.PRUNE_MAX_TOKENS = saved


def numpy_bm25(index: LocalIndex):
    """``LocalIndex.bm25`` without the compiled scorer: ``score_segments`` over every document
    of every segment, then the top ``depth`` (the index's path without numba)."""
    parts = [(seg.postings, seg.deleted) for seg in index.segments]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)

    def search(query: str, depth: int):
        found = []
        for seg, scores in zip(index.segments, bm25_lib.score_segments(parts, tokenize(query), stats, weights)):
            rows = np.flatnonzero(scores > 0)
            found.append(SegmentRows.best(seg, scores[rows], rows, depth))
        return entry_hits(ranked_entries(found, depth), {})

    return search


def main() -> None:
    parser = index_query_parser(__doc__, depth=DEFAULT_DEPTH, rounds=2)
    parser.add_argument("--corpus", type=Path, default=None,
                        help="the documents of the index (for bm25s; its order need not match) [default: skip bm25s]")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()

    index = LocalIndex.open(args.index)
    encoder = Encoder.load(index.model_dir)
    searcher = HybridSearcher(index, encoder)
    texts = read_queries(args.queries, args.n, args.seed)
    vectors = encoder.encode(texts, show_progress=False)
    prepared = prepare_vectors(vectors, index.distance)
    n, depth = len(texts), args.depth
    candidates = [Candidates(index.bm25(q, depth), index.knn(v, depth)) for q, v in zip(texts, vectors)]  # warms up
    ids10 = [[h.id for h in c.bm25[:10]] for c in candidates]
    serial = HybridSearcher(index, encoder)
    # one thread: encode, then BM25, then kNN (``v`` is the encoding function hybrid passes)
    serial.candidates = lambda q, v, d, f=None: Candidates(index.bm25(q, d, f), index.knn(v() if callable(v) else v, d, f))  # type: ignore[method-assign]

    dense_bm25 = numpy_bm25(index)
    steps = {
        "encode": lambda i: encoder.encode([texts[i]]),
        "bm25 list": lambda i: index.bm25(texts[i], depth),
        "bm25 list, exhaustive": lambda i: exhaustive_bm25(index, texts[i], depth),
        "bm25 list, numpy": lambda i: dense_bm25(texts[i], depth),
    }
    result = {"index": repo_relative(args.index), "documents": index.count(), "segments": len(index.segments),
              "factories": sorted({s.entry["factory"] for s in index.segments}),
              "search_settings": dataclasses.asdict(index.search_settings),
              "queries": n, "depth": depth, "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()}
    if args.corpus:
        import bm25s

        corpus_tokens = [tokenize(doc.text) for _, doc in iter_documents(args.corpus)]
        query_tokens = [tokenize(t) for t in texts]
        for backend in ("numba", "numpy"):
            model = bm25s.BM25(k1=bm25_lib.BM25_K1, b=bm25_lib.BM25_B, backend=backend)
            model.index(corpus_tokens, show_progress=False)
            vocab = model.vocab_dict
            known = [[t for t in q if t in vocab] or [next(iter(vocab))] for q in query_tokens]
            model.retrieve([known[0]], k=depth, show_progress=False, n_threads=1)  # compiles the numba kernels
            steps[f"bm25s {backend}"] = (lambda m, kn: lambda i: m.retrieve([kn[i]], k=depth, show_progress=False,
                                                                            n_threads=1))(model, known)

    def vector_index(i: int) -> None:
        with one_thread():
            for unit in knn_units(index.segments, index.base):  # the vector base is one search for its segments
                if unit is index.base:
                    unit.candidates(prepared[i:i + 1], depth, index.distance)
                else:
                    unit.faiss.search(prepared[i:i + 1], depth)

    steps.update({
        "vector index": vector_index,
        "knn list": lambda i: index.knn(vectors[i], depth),
        "fetch 10": lambda i: index.documents(ids10[i]),
        "fusion": lambda i: searcher.fuse(candidates[i], fusion="rrf", alpha=0.5, depth=depth, top_k=10),
        "bm25 mode": lambda i: searcher.search(texts[i], mode="bm25"),
        "knn mode": lambda i: searcher.search(texts[i], mode="knn"),
        "hybrid mode": lambda i: searcher.search(texts[i], mode="hybrid", depth=depth),
        "hybrid mode, one thread": lambda i: serial.search(texts[i], mode="hybrid", depth=depth),
    })
    out: dict[str, dict] = {name: {} for name in steps}
    for _ in range(args.rounds):
        for name, call in steps.items():
            row = timed(call, n, 1)
            if not out[name] or row["wall_p50_ms"] < out[name]["wall_p50_ms"]:
                out[name] = row
    result["steps"] = out
    result["load_average_at_end"] = os.getloadavg()
    print(f"{n} queries, depth {depth}, {result['documents']} documents in {result['segments']} segments "
          f"({', '.join(result['factories'])}); load average {result['load_average_at_start']} -> "
          f"{result['load_average_at_end']}")
    print("| step | wall p50 ms | wall p95 ms | CPU p50 ms |")
    print("|---|---:|---:|---:|")
    for name, row in out.items():
        print(f"| {name} | {row['wall_p50_ms']:.3f} | {row['wall_p95_ms']:.3f} | {row['cpu_p50_ms']:.3f} |")
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
