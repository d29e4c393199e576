"""kNN across segments: a top-10 ``knn`` over an index of several segments against the merged
index, and the cost of adding documents to a large index (issue 24, item 2).

Steps::

``layout``  writes an index of ``--segments`` equal segments from the live rows (texts and
            stored vectors) of an existing index by that many ingests (the stored vectors are
            reused, nothing is re-encoded): ``--faiss auto`` (the default:
            the large segments share the vector base) or ``--faiss hnsw`` (one graph per
            segment, the layout before the vector base). Prints each ingest's seconds.
``query``   p50/p99 ms of ``knn(vector, --k)`` on each index (query vectors encoded
            beforehand, one query at a time), in ``--rounds`` rounds alternating between the
            indexes, and each index's recall@k against exact search over its live vectors.

Adding 1,000 documents to the 10-segment index is timed by ``bench_segments.py add`` (opening
the index and ingesting ``add.jsonl``; the manifest's ``vector_base`` record shows whether the
graph was touched).

Usage (numbers in docs/search.md, "One vector index across segments")::

    python benchmarks/bench_segment_knn.py layout data/seg-bench/idx --out WORKDIR/base10 --segments 10
    python benchmarks/bench_segment_knn.py layout data/seg-bench/idx --out WORKDIR/merged --segments 1
    python benchmarks/bench_segment_knn.py layout data/seg-bench/idx --out WORKDIR/hnsw10 --segments 10 --faiss hnsw
    python benchmarks/bench_segment_knn.py query WORKDIR/base10 WORKDIR/merged WORKDIR/hnsw10 --queries data/seg-bench/queries.txt
    python benchmarks/bench_segments.py add WORKDIR/base10 --docs data/seg-bench/add.jsonl
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.vectors import metric_type
from hybrid_qpr.backends.local.writer import read_live_rows
from hybrid_qpr.distance import prepare_vectors, score_from_faiss
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.errors import require
from hybrid_qpr.types import Document


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class StoredVectors:
    """The index's encoder, answering with the stored vector of a text it already holds (so a
    layout is written by real ingests without encoding a million texts again)."""

    def __init__(self, encoder: Encoder, stored: dict[str, np.ndarray]):
        self.encoder, self.stored = encoder, stored
        self.fingerprint, self.dim, self.distance = encoder.fingerprint, encoder.dim, encoder.distance
        self.kind, self.model_dir = getattr(encoder, "kind", ""), encoder.model_dir

    def encode(self, texts, **kwargs) -> np.ndarray:
        if all(t in self.stored for t in texts):
            return np.stack([self.stored[t] for t in texts])
        return self.encoder.encode(texts, **kwargs)


def build_layout(source: Path, out: Path, segments: int, faiss_kind: str) -> dict:
    """``source``'s live rows written into a new index at ``out`` by ``segments`` ingests."""
    src = LocalIndex.open(source)
    docs, stored = [], {}
    for entry in src.manifest["segments"]:
        part = read_live_rows(src.path, entry, src.dim, src.distance, None)
        for doc_id, text, metadata, vector in zip(part.ids, part.texts, part.metadata, part.vectors):
            docs.append(Document(doc_id, text, json.loads(metadata) if metadata != "{}" else {}))
            stored[text] = vector
    encoder = StoredVectors(Encoder.load(src.model_dir), stored)
    src.close()
    index = LocalIndex.create(out, encoder, faiss=faiss_kind)
    bounds = np.linspace(0, len(docs), segments + 1).astype(int)
    ingests = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        report = index.ingest(docs[start:end], encoder, show_progress=False, segment_docs=len(docs))
        ingests.append({"documents": int(end - start), "seconds": round(report.seconds, 2)})
        print(json.dumps(ingests[-1]), flush=True)
    return {"index": str(out), "documents": index.count(), "segments": len(index.segments), "ingests": ingests,
            "peak_rss_mb": peak_rss_mb()}


def exact_top(index: LocalIndex, queries: np.ndarray, k: int) -> list[set[str]]:
    """The exact top ``k`` ids of each query over every live vector of ``index``."""
    faiss = require("faiss", feature="exact search")
    metric = metric_type(index.distance)
    best: list[list[tuple[float, str]]] = [[] for _ in queries]
    for seg in index.segments:
        rows = np.arange(seg.count) if seg.deleted is None else np.flatnonzero(~seg.deleted)
        raw, hits = faiss.knn(queries, np.ascontiguousarray(seg.vectors[rows]), min(k, len(rows)), metric)
        scores = score_from_faiss(raw, index.distance)
        for q in range(len(queries)):
            valid = hits[q] >= 0
            best[q] += zip(scores[q][valid].tolist(), seg.ids_at(rows[hits[q][valid]]))
    return [{doc for _, doc in sorted(b, key=lambda x: (-x[0], x[1]))[:k]} for b in best]


def bench_query(paths: list[Path], queries_path: Path, limit: int, k: int, rounds: int) -> dict:
    texts = [q.strip() for q in queries_path.read_text(encoding="utf-8").splitlines() if q.strip()][:limit]
    indexes = [LocalIndex.open(p) for p in paths]
    encoder = Encoder.load(indexes[0].model_dir)
    vectors = np.asarray(encoder.encode(texts, show_progress=False), dtype=np.float32)
    out: dict = {"queries": len(texts), "k": k, "indexes": {}}
    for path, index in zip(paths, indexes):
        index.knn(vectors[0], k)  # warm-up: FAISS files are read and checked on first use
        out["indexes"][path.name] = {"documents": index.count(), "segments": len(index.segments),
                                     "vector_base": bool(index.base), "rounds": []}
    for _ in range(rounds):
        for path, index in zip(paths, indexes):
            times = []
            for vector in vectors:
                start = time.perf_counter()
                index.knn(vector, k)
                times.append(time.perf_counter() - start)
            ms = np.asarray(times) * 1000
            out["indexes"][path.name]["rounds"].append({"p50_ms": round(float(np.percentile(ms, 50)), 3),
                                                         "p99_ms": round(float(np.percentile(ms, 99)), 3)})
    for path, index in zip(paths, indexes):
        entry = out["indexes"][path.name]
        entry["p50_ms"] = float(np.median([r["p50_ms"] for r in entry["rounds"]]))
        entry["p99_ms"] = float(np.median([r["p99_ms"] for r in entry["rounds"]]))
        prepared = prepare_vectors(vectors, index.distance)
        exact = exact_top(index, prepared, k)
        found = [{hit.id for hit in index.knn(v, k)} for v in vectors]
        entry[f"recall@{k}"] = round(sum(len(f & e) for f, e in zip(found, exact)) / sum(len(e) for e in exact), 4)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    layout = sub.add_parser("layout")
    layout.add_argument("source", type=Path)
    layout.add_argument("--out", type=Path, required=True)
    layout.add_argument("--segments", type=int, default=10)
    layout.add_argument("--faiss", choices=("auto", "hnsw"), default="auto")
    query = sub.add_parser("query")
    query.add_argument("indexes", type=Path, nargs="+")
    query.add_argument("--queries", type=Path, required=True)
    query.add_argument("--limit", type=int, default=300)
    query.add_argument("--k", type=int, default=10)
    query.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.step == "layout":
        result = build_layout(args.source, args.out, args.segments, args.faiss)
    else:
        result = bench_query(args.indexes, args.queries, args.limit, args.k, args.rounds)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
