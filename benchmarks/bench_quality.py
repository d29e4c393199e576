"""Every encoder on one dataset's test split, full corpus: knn, tuned hybrid, rerank, encode speed.

python benchmarks/bench_quality.py --dataset /work/data/quora --index IDX \
    --encoder cnn=onnx/sdml-cnn-quora --encoder minilm=/work/data/minilm-l32-int8 \
    --cache /work/data/quality-cache --out benchmarks/results/quality-quora.json [--fuse3 cnn,minilm]

The same protocol as ``hybrid-qpr tune`` + ``hybrid-qpr evaluate`` on a local index with exact
(Flat) vectors, computed in batches so that a 250k-question corpus and four encoders fit on
2 cores: every corpus question is encoded once per encoder (the BEIR queries are corpus
questions, so their vectors are the corpus rows; an int8 model's vector depends slightly on
the batch it was encoded in, where ``evaluate`` encodes each query alone), kNN is exact by the encoder's distance
(``hybrid_qpr.distance.similarity``), BM25 lists come from the local index IDX (any index of
the same corpus; its own vectors are not used), fusion is tuned on 5,000 val queries by
``hybrid_qpr.evaluation.evaluator.tune_candidates`` (the grid of ``hybrid-qpr tune``) and
applied to every test query with ``search.hybrid_page``; rerank orders BM25's top 30 by the
encoder (the MSEM flow of ``HybridSearcher``). Metrics: retrieve 20, own id dropped
(``hybrid_qpr.evaluation.tasks``).

``--fuse3 A,B`` also tunes a three-list fusion (BM25, encoder A, encoder B) with the same
methods and a 0.1 weight grid on the simplex, and evaluates its winner on test.

Encode speed: questions/s over the first 3,000 corpus questions in batches of 512
(onnxruntime, ``--threads``) and the p50 of 300 single-question encodes; measured on whatever
else the machine runs (say so when quoting). Vectors are cached under ``--cache`` (keyed by
the corpus and the model fingerprint) with that speed; vectors the model already made are
reused instead of encoding again (those stored in IDX when it was built with the same model,
and ``--teacher-cache``).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import time
from pathlib import Path

import numpy as np

from _common import repo_relative
from hybrid_qpr import fusion as fusion_lib
from hybrid_qpr.artifacts import atomic_write, write_json
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.distance import prepare_vectors, similarity
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import (latency_summary, sample_queries, top_k_indices, tune_candidates,
                                             tuning_request)
from hybrid_qpr.evaluation.tasks import get_task
from hybrid_qpr.fusion import FUSION_METHODS
from hybrid_qpr.search import DEFAULT_DEPTH, RERANK_DEPTH, hybrid_page
from hybrid_qpr.types import Candidates, Hit

TASK = get_task("paraphrase")
RETRIEVE = TASK.retrieve
SPEED_SAMPLE = 3000  # corpus questions encoded in batches of 512 to measure throughput


def corpus_key(ids: list[str], texts: list[str]) -> str:
    digest = hashlib.sha256()
    for doc_id, text in zip(ids, texts):
        digest.update(f"{doc_id}\t{text}\n".encode())
    return digest.hexdigest()[:16]


def teacher_rows(enc: Encoder, spec: str | None) -> dict[str, np.ndarray]:
    """Vectors this encoder already made as a ``hybrid-qpr distill`` teacher (``CORPUS:CACHE_DIR``):
    text -> row of the teacher cache of CORPUS, if that cache exists for this very model."""
    if not spec:
        return {}
    from hybrid_qpr.training.distill import load_questions
    from hybrid_qpr.training.teacher import cache_path, corpus_fingerprint

    corpus, cache_dir = spec.rsplit(":", 1)
    texts = load_questions(corpus)
    path = cache_path(cache_dir, corpus_fingerprint(texts), enc.fingerprint)
    if not path.is_file():
        print(f"no teacher cache of this model at {path}: encoding everything", flush=True)
        return {}
    rows = np.load(path, mmap_mode="r")
    return dict(zip(texts, rows))


def index_rows(enc: Encoder, index, ids: list[str], texts: list[str]) -> dict[str, np.ndarray]:
    """text -> vector stored in the local index, when the index was built with this very model."""
    if index.manifest["model"]["fingerprint"] != enc.fingerprint:
        return {}
    text_of = dict(zip(ids, texts))
    known = {}
    for seg in index.segments:
        for doc_id, pos in seg.lookup(ids):
            known[text_of[doc_id]] = np.asarray(seg.vectors[pos], dtype=np.float32)
    return known


_worker_encoder: Encoder | None = None


def _load_worker(model_dir: str, threads: int) -> None:
    global _worker_encoder
    _worker_encoder = Encoder.load(model_dir, threads=threads)


def _encode_in_worker(texts: list[str]) -> np.ndarray:
    assert _worker_encoder is not None
    return np.asarray(_worker_encoder.encode(texts, batch_size=512), dtype=np.float32)


def encode_all(enc: Encoder, texts: list[str], workers: int, threads: int) -> np.ndarray:
    """``enc.encode`` of ``texts``, split over ``workers`` processes when there are many."""
    if workers <= 1 or len(texts) < 10_000:
        return np.asarray(enc.encode(texts, batch_size=512), dtype=np.float32)
    from concurrent.futures import ProcessPoolExecutor

    step = 4096
    with ProcessPoolExecutor(workers, initializer=_load_worker, initargs=(str(enc.model_dir), threads)) as pool:
        parts = list(pool.map(_encode_in_worker, [texts[i:i + step] for i in range(0, len(texts), step)]))
    return np.concatenate(parts)


def encoded_corpus(enc: Encoder, ids: list[str], texts: list[str], cache: Path,
                   known: dict[str, np.ndarray], workers: int = 1, threads: int = 1) -> tuple[np.ndarray, dict]:
    """Corpus vectors (cached) and the speed measured when they were made; texts in ``known``
    (vectors the model already made: in the index, as a distillation teacher) are not
    encoded again."""
    path = cache / f"{corpus_key(ids, texts)}-{enc.fingerprint}.npy"
    meta_path = path.with_suffix(".json")
    if path.is_file() and meta_path.is_file():
        return np.load(path), json.loads(meta_path.read_text())
    cache.mkdir(parents=True, exist_ok=True)
    todo = [i for i, text in enumerate(texts) if text not in known]
    vectors = np.zeros((len(texts), int(enc.dim)), dtype=np.float32)
    if todo:
        vectors[todo] = encode_all(enc, [texts[i] for i in todo], workers, threads)
    for i, text in enumerate(texts):
        if text in known:
            vectors[i] = known[text]
    sample = texts[:SPEED_SAMPLE]
    t0 = time.perf_counter()
    enc.encode(sample, batch_size=512)
    seconds = time.perf_counter() - t0
    single = []
    for text in texts[:300]:
        t = time.perf_counter()
        enc.encode([text])
        single.append(time.perf_counter() - t)
    meta = {"corpus": len(texts), "encoded": len(todo), "reused": len(texts) - len(todo),
            "encode_questions_per_s": round(len(sample) / seconds, 1), "speed_sample": len(sample),
            "single_query_ms_p50": round(latency_summary(single)["p50_ms"], 3)}
    with atomic_write(path, "wb") as fh:
        np.save(fh, vectors)
    write_json(meta_path, meta)
    return vectors, meta


def knn_lists(query_rows: np.ndarray, vectors: np.ndarray, ids: list[str], distance: str, depth: int,
              chunk: int = 256) -> list[list[Hit]]:
    """Exact top ``depth`` of each query row (own row included, as the local index returns it)."""
    docs = prepare_vectors(vectors, distance)
    out = []
    for start in range(0, len(query_rows), chunk):
        scores = similarity(docs[query_rows[start:start + chunk]], docs, distance)
        for row, top in zip(scores, top_k_indices(scores, depth)):
            out.append([Hit(ids[j], float(row[j])) for j in top])
    return out


def reranked(bm25: list[Hit], query_vector: np.ndarray, vectors: np.ndarray, row_of: dict[str, int],
             distance: str) -> list[str]:
    """BM25's top ``RERANK_DEPTH`` ordered by encoder similarity, ties by id (HybridSearcher._rerank)."""
    recalled = [h.id for h in bm25[:RERANK_DEPTH]]
    if not recalled:
        return []
    sims = similarity(query_vector[None, :], vectors[[row_of[i] for i in recalled]], distance)[0]
    return [doc_id for _, doc_id in sorted(zip(-sims, recalled))]


def score(run: dict[str, list[str]], qrels) -> dict[str, float]:
    return {k: round(v, 4) for k, v in TASK.score(run, qrels).items()}


def corpus_subset(corpus: dict[str, str], queries: dict[str, str], qrels, size: int) -> dict[str, str]:
    """The queries, their judged documents, and a seeded random sample of the others up to ``size``."""
    import random

    keep = set(queries) | {doc for q in queries for doc in qrels.get(q, {})}
    others = sorted(set(corpus) - keep)
    keep |= set(random.Random(13).sample(others, max(0, min(len(others), size - len(keep)))))
    return {doc_id: text for doc_id, text in corpus.items() if doc_id in keep}


def simplex(n: int, steps: int = 10) -> list[tuple[float, ...]]:
    return [tuple(c / steps for c in combo) for combo in itertools.product(range(steps + 1), repeat=n)
            if sum(combo) == steps]


def fuse_lists(lists: list[list[Hit]], fusion: str, weights: tuple[float, ...], depth: int) -> list[str]:
    if fusion == "rrf":
        fused = fusion_lib.rrf(lists, weights=weights, depth=depth, top_k=RETRIEVE)
    else:
        fused = fusion_lib.weighted_sum(lists, normalisation=fusion, weights=weights, depth=depth, top_k=RETRIEVE)
    return [f.id for f in fused]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset directory (its beir/ is read)")
    ap.add_argument("--index", required=True, help="local index of the same corpus (BM25 lists)")
    ap.add_argument("--encoder", action="append", required=True, help="NAME=MODEL_DIR (repeatable)")
    ap.add_argument("--teacher-cache", action="append", default=[],
                    help="NAME=CORPUS:CACHE_DIR: reuse encoder NAME's distillation teacher vectors of CORPUS")
    ap.add_argument("--cache", required=True, help="directory for cached corpus vectors")
    ap.add_argument("--val-queries", type=int, default=5000)
    ap.add_argument("--test-queries", type=int, default=None, help="seeded sample of test queries [default: all]")
    ap.add_argument("--max-corpus", type=int, default=None,
                    help="evaluate on a corpus SUBSET of this size (for slow encoders; not the full-corpus protocol)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1, help="processes encoding the corpus (speed is measured in one)")
    ap.add_argument("--fuse3", default=None, help="A,B: also tune BM25 + encoder A + encoder B")
    ap.add_argument("--fuse3-val-queries", type=int, default=1000,
                    help="val queries the three-list grid (4 methods x 66 weight triples) is tuned on")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from hybrid_qpr.backends.local import LocalIndex

    corpus, test_queries, test_qrels = load_beir(f"{args.dataset}/beir", "test")
    _, val_all, val_qrels = load_beir(f"{args.dataset}/beir", "val")
    val_queries = sample_queries(val_all, val_qrels, args.val_queries)
    test_queries = sample_queries(test_queries, test_qrels, args.test_queries)
    protocol = "exact kNN, fusion tuned on val, retrieve 20, own id dropped"
    fetch = DEFAULT_DEPTH
    if args.max_corpus:
        corpus = corpus_subset(corpus, {**val_queries, **test_queries}, {**val_qrels, **test_qrels}, args.max_corpus)
        fetch = 1000  # BM25 of the full index, cut to the subset: fetch deep enough to keep 100
        protocol += (f"; SUBSET: {len(corpus):,} corpus questions (the sampled queries, their paraphrases, random others); "
                     "BM25 statistics of the full corpus")
    ids, texts = list(corpus), list(corpus.values())
    row_of = {doc_id: i for i, doc_id in enumerate(ids)}
    index = LocalIndex.open(args.index)
    t0 = time.perf_counter()
    bm25 = {q: [h for h in index.bm25(text, fetch) if h.id in row_of][:DEFAULT_DEPTH]
            for q, text in {**val_queries, **test_queries}.items()}
    bm25_seconds = time.perf_counter() - t0
    result = {"dataset": repo_relative(args.dataset), "corpus": len(ids), "test_queries": len(test_queries),
              "val_queries": len(val_queries), "protocol": protocol,
              "bm25": {"test": score({q: [h.id for h in bm25[q][:RETRIEVE]] for q in test_queries}, test_qrels),
                       "queries_per_s": round(len(bm25) / bm25_seconds, 1)},
              "encoders": {}}
    knn_by_encoder: dict[str, dict[str, list[Hit]]] = {}
    for spec in args.encoder:
        name, model_dir = spec.split("=", 1)
        enc = Encoder.load(model_dir, threads=args.threads)
        reuse = dict(item.split("=", 1) for item in args.teacher_cache).get(name)
        known = {**teacher_rows(enc, reuse), **index_rows(enc, index, ids, texts)}
        vectors, speed = encoded_corpus(enc, ids, texts, Path(args.cache), known, args.workers, args.threads)
        qids = list(val_queries) + list(test_queries)
        knn = dict(zip(qids, knn_lists(np.array([row_of[q] for q in qids]), vectors, ids, enc.distance, DEFAULT_DEPTH)))
        knn_by_encoder[name] = knn
        lists = {q: Candidates.of_hits(bm25[q], knn[q]) for q in {**val_queries, **test_queries}}
        tuned = tune_candidates({q: lists[q] for q in val_queries}, val_qrels, depth=DEFAULT_DEPTH)
        tuned_request = tuning_request(tuned.fusion, tuned.alpha, DEFAULT_DEPTH, RETRIEVE)
        equal_request = tuning_request("rrf", 0.5, DEFAULT_DEPTH, RETRIEVE)
        docs = prepare_vectors(vectors, enc.distance)
        runs = {
            "knn": {q: [h.id for h in knn[q][:RETRIEVE]] for q in test_queries},
            "hybrid": {q: [f.id for f in hybrid_page(lists[q], tuned_request).fused] for q in test_queries},
            "hybrid_rrf_equal": {q: [f.id for f in hybrid_page(lists[q], equal_request).fused] for q in test_queries},
            "rerank": {q: reranked(bm25[q], docs[row_of[q]], docs, row_of, enc.distance)[:RETRIEVE]
                       for q in test_queries},
        }
        result["encoders"][name] = {
            "model": repo_relative(model_dir), "distance": enc.distance, "dim": int(vectors.shape[1]), **speed,
            "tuned": {"fusion": tuned.fusion, "alpha": tuned.alpha, "val_mrr@20": round(tuned.mrr, 4),
                      "val_bm25": round(tuned.bm25_mrr, 4), "val_knn": round(tuned.knn_mrr, 4)},
            "test": {mode: score(run, test_qrels) for mode, run in runs.items()},
        }
        print(json.dumps({name: result["encoders"][name]}, indent=1), flush=True)
        write(result, args.out)  # after every encoder: a long run leaves usable partial results
    if args.fuse3:
        first, second = args.fuse3.split(",")
        lists = {q: [bm25[q], knn_by_encoder[first][q], knn_by_encoder[second][q]] for q in {**val_queries, **test_queries}}
        grid = []
        tune_on = dict(list(val_queries.items())[: args.fuse3_val_queries])
        for fusion in FUSION_METHODS:
            for weights in simplex(3):
                run = {q: fuse_lists(lists[q], fusion, weights, DEFAULT_DEPTH) for q in tune_on}
                grid.append((TASK.score(run, val_qrels)["MRR@20"], fusion, weights))
        best_val, fusion, weights = max(grid, key=lambda g: g[0])
        run = {q: fuse_lists(lists[q], fusion, weights, DEFAULT_DEPTH) for q in test_queries}
        result["fuse3"] = {"lists": ["bm25", first, second], "fusion": fusion, "weights": list(weights),
                           "tuned_on_val_queries": len(tune_on),
                           "val_mrr@20": round(best_val, 4), "test": score(run, test_qrels)}
        print(json.dumps({"fuse3": result["fuse3"]}, indent=1), flush=True)
    write(result, args.out)


def write(result: dict, out: str) -> None:
    write_json(out, result)


if __name__ == "__main__":
    main()
