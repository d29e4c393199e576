"""The top-1 and MRR@20 of the local index's HNSW defaults at one million documents.

Corpus: the ``corpus.jsonl`` of ``bench_segments.py data`` (every distinct question of a Quora
pairs file, then numbered copies ``"<question> 2"``, ``"<question> 3"``, ...). Queries: the
test queries of a dataset built from the same pairs file (``hybrid-qpr dataset build``), each
a stored question; ``--queries`` of them, seeded. Relevant: the qrels' questions and every
numbered copy of them; the query's own rows (its text and its copies) are dropped from both
rankings, as ``evaluate`` drops the query's own id.

Steps, one run:

1. the corpus encoded with ``--model`` into VECTORS (``.npy`` prepared for the model's
   distance, ``.json`` with the distance), written in chunks of ``CHUNK`` texts so that an
   interrupted run resumes where it stopped;
2. one HNSW graph as the local index builds its vector base (``vectors.build_faiss``,
   ``HNSW32``, efConstruction ``EF_CONSTRUCTION``) and the efSearch ``vectors.calibrate_ef``
   chooses on it;
3. exact search (``faiss.knn``) and the graph at each ``--ef`` plus the calibrated one: MRR@20
   (gap to exact), the share of queries whose own text (or a row exactly as near) comes first,
   and p50 ms of one search at k 30 on one thread.

    python benchmarks/bench_hnsw_1m.py WORKDIR/minilm-1m --corpus WORKDIR/data/corpus.jsonl \\
        --dataset WORKDIR/quora --model onnx/minilm-l6-quora-int8 --out benchmarks/results/hnsw-calibration-minilm-1m.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from _common import command_line
from hybrid_qpr.artifacts import write_json

CHUNK = 50_000


def encode_corpus(texts: list[str], model: str, out: Path) -> np.ndarray:
    """``texts`` encoded and prepared for the model's distance, cached at ``out``.npy; chunks
    of ``CHUNK`` are kept as ``out``.partNNNN.npy until all are done (a rerun resumes)."""
    from hybrid_qpr.distance import prepare_vectors
    from hybrid_qpr.encoders import Encoder

    final = out.with_suffix(".npy")
    if final.exists():
        return np.load(final, mmap_mode="r")
    encoder = Encoder.load(model)
    parts, started = [], time.perf_counter()
    for number, start in enumerate(range(0, len(texts), CHUNK)):
        part = out.with_suffix(f".part{number:04d}.npy")
        if not part.exists():
            vectors = prepare_vectors(encoder.encode(texts[start:start + CHUNK], batch_size=256), encoder.distance)
            np.save(part.with_suffix(".tmp.npy"), vectors)
            os.replace(part.with_suffix(".tmp.npy"), part)
            done = start + len(vectors)
            print(json.dumps({"encoded": done, "per_s": round(done / (time.perf_counter() - started), 1)}), flush=True)
        parts.append(part)
    np.save(final, np.concatenate([np.load(p) for p in parts]))
    out.with_suffix(".json").write_text(json.dumps({"distance": encoder.distance, "model": model}), encoding="utf-8")
    for p in parts:
        p.unlink()
    return np.load(final, mmap_mode="r")


def measure(args: argparse.Namespace, texts: list[str], vectors: np.ndarray) -> None:
    import faiss

    from hybrid_qpr.backends.local.vectors import (EF_CONSTRUCTION, build_faiss, calibrate_ef, faiss_factory, metric_type,
                                                   one_thread)

    distance = json.loads(args.vectors.with_suffix(".json").read_text(encoding="utf-8"))["distance"]
    metric = metric_type(distance)
    # bench_segments' layout: row i + j * distinct is copy j + 1 of distinct question i
    distinct = texts.index(f"{texts[0]} 2") if f"{texts[0]} 2" in texts else len(texts)
    base_row = {text: i for i, text in enumerate(texts[:distinct])}

    def rows_of(row: int) -> set[int]:
        return set(range(row, len(texts), distinct))

    corpus = {}
    for line in open(args.dataset / "beir" / "corpus.jsonl", encoding="utf-8"):
        doc = json.loads(line)
        corpus[doc["_id"]] = base_row[doc["text"]]
    qrels: dict[str, set[str]] = {}
    for line in open(args.dataset / "beir" / "qrels" / "test.tsv", encoding="utf-8"):
        query, doc, *_ = line.rstrip("\n").split("\t")
        if query != "query-id":
            qrels.setdefault(query, set()).add(doc)
    picked = sorted(np.random.default_rng(13).choice(sorted(qrels), min(args.queries, len(qrels)), replace=False))
    own = [corpus[q] for q in picked]
    relevant = [set().union(*(rows_of(corpus[d]) for d in qrels[q])) for q in picked]
    queries = np.ascontiguousarray(vectors[own])
    k = 20 + len(texts) // distinct + 1  # room for the query's own rows, which are dropped

    def scored(found: np.ndarray) -> tuple[float, float]:
        """MRR@20 (own rows dropped) and the share whose first hit is the own text or as near."""
        total, first = 0.0, 0
        for row, hits, rel in zip(own, found, relevant):
            mine = rows_of(row)
            ranked = [h for h in hits if h >= 0 and h not in mine][:20]
            total += next((1.0 / (i + 1) for i, h in enumerate(ranked) if h in rel), 0.0)
            top = int(hits[0])
            if top == row or (top >= 0 and _as_near(vectors, row, top, metric)):
                first += 1
        return total / len(own), first / len(own)

    started = time.perf_counter()
    _, exact = faiss.knn(queries, vectors, k, metric)
    exact_s = time.perf_counter() - started
    exact_mrr, exact_first = scored(exact)
    print(json.dumps({"exact_mrr20": exact_mrr, "exact_first": exact_first, "exact_s": exact_s}), flush=True)
    started = time.perf_counter()
    graph = build_faiss(vectors, distance, faiss_factory(len(vectors), "hnsw"))
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    calibrated = calibrate_ef(graph, vectors, distance)
    calibrate_s = time.perf_counter() - started
    print(json.dumps({"build_s": build_s, "calibrated_ef": calibrated, "calibrate_s": calibrate_s}), flush=True)
    rows = []
    for ef in sorted(set(args.ef) | {calibrated}):
        params = faiss.SearchParametersHNSW(efSearch=max(ef, k))
        with one_thread():
            _, found = graph.search(queries, k, params=params)
            times = []
            for query in queries[:300]:
                start = time.perf_counter()
                graph.search(query[None], 30, params=faiss.SearchParametersHNSW(efSearch=max(ef, 30)))
                times.append(time.perf_counter() - start)
        mrr, first = scored(found)
        rows.append({"ef": ef, "mrr20": mrr, "mrr_gap": exact_mrr - mrr, "own_text_first": first,
                     "p50_ms_k30": float(np.median(times) * 1e3)})
        print(json.dumps(rows[-1]), flush=True)
    write_json(args.out, {"command": command_line(), "documents": len(texts), "distinct_questions": distinct,
                          "queries": len(own), "model": args.model, "distance": distance,
                          "ef_construction": EF_CONSTRUCTION, "exact_mrr20": exact_mrr, "exact_own_text_first": exact_first,
                          "exact_s": exact_s, "build_s": build_s, "calibrated_ef": calibrated,
                          "calibrate_s": calibrate_s, "load_average": os.getloadavg(), "rows": rows})


def _as_near(vectors: np.ndarray, own: int, found: int, metric: int) -> bool:
    """Whether row ``found`` is exactly as near the query (row ``own``'s vector) as ``own`` itself (float64)."""
    import faiss

    q, got = vectors[own].astype(np.float64), vectors[found].astype(np.float64)
    if metric == faiss.METRIC_L2:
        return float(((got - q) ** 2).sum()) <= 1e-9
    return float(got @ q) >= float(q @ q) - 1e-9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vectors", type=Path, help="the cache of the corpus's vectors (without .npy)")
    parser.add_argument("--corpus", type=Path, required=True, help="bench_segments.py data's corpus.jsonl")
    parser.add_argument("--dataset", type=Path, help="hybrid-qpr dataset build's directory (needed after encoding)")
    parser.add_argument("--model", required=True, help="encoder directory")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--ef", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--encode-only", action="store_true", help="stop after step 1")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    texts = [json.loads(line)["text"] for line in open(args.corpus, encoding="utf-8")]
    vectors = encode_corpus(texts, args.model, args.vectors)
    if args.encode_only:
        return
    measure(args, texts, np.ascontiguousarray(vectors, dtype=np.float32))


if __name__ == "__main__":
    main()
