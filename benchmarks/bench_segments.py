"""Benchmark of the segmented local index at one million documents.

Steps (each its own command, so peak memory is measured per step by ``/usr/bin/time -v``):

``data``   writes the corpus: every distinct question of one or more pairs files (Quora's,
           then WikiAnswers'), then numbered variants of them (``"<question> 2"``,
           ``"<question> 3"``, ...) up to ``--n`` documents, plus ``add.jsonl`` (1,000 new
           documents) and ``queries.txt``.
``dups``   writes a bank of near-duplicates as FAQ logs and support tickets are: ``--n`` short
           questions drawn (seeded) from few templates (``NEAR_DUPLICATE_PARTS``: 8 x 12 x 10 x 9
           = 8,640 texts), so each text comes back about ``n / 8,640`` times under its own id;
           plus ``queries.txt`` (other draws of the same parts).
``add``    times opening an index and ingesting ``add.jsonl`` into it (the library call;
           the CLI adds its start-up, measured separately with ``time``).
``query``  p50/p95 ms of the BM25 list, the kNN list (query vectors encoded beforehand)
           and the full hybrid search (encoding included), one query at a time; also the
           p50 CPU time of the calling thread.
``bm25``   scoring time per query of the segment postings (corpus-wide statistics) against
           the bm25s library over the same tokens of a JSONL corpus, in one process.

Usage (the numbers in docs/search.md; the machine is shared, so they are noisy)::

    python benchmarks/bench_segments.py data /work/shared/data/quora-pairs.tsv.gz --out /work/data/seg-bench
    /usr/bin/time -v hybrid-qpr ingest /work/data/seg-bench/corpus.jsonl --index /work/data/seg-bench/idx
    python benchmarks/bench_segments.py query /work/data/seg-bench/idx --queries /work/data/seg-bench/queries.txt
    cp -r /work/data/seg-bench/idx /work/data/seg-bench/idx-merged
    /usr/bin/time -v hybrid-qpr index optimize /work/data/seg-bench/idx-merged
    python benchmarks/bench_segments.py query /work/data/seg-bench/idx-merged --queries /work/data/seg-bench/queries.txt
    python benchmarks/bench_segments.py add /work/data/seg-bench/idx --docs /work/data/seg-bench/add.jsonl
    python benchmarks/bench_segments.py bm25 /work/data/quora/beir/corpus.jsonl --queries /work/data/quora/beir/queries.jsonl
    python benchmarks/bench_segments.py dups --n 300000 --out /work/data/dup300k
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.errors import BadLines
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import latency_summary
from hybrid_qpr.search import HybridSearcher


# a support desk's questions: an opening, a verb, a thing, an ending (8 x 12 x 10 x 9 texts)
NEAR_DUPLICATE_PARTS = (
    ("how do i", "how can i", "i want to", "i need to", "can i", "where do i", "is it possible to", "help me"),
    ("reset", "change", "update", "delete", "recover", "verify", "add", "remove", "find", "edit", "cancel", "transfer"),
    ("my password", "my email address", "my account", "my username", "my phone number", "my order",
     "my subscription", "my payment method", "my profile picture", "my shipping address"),
    ("", "?", " please", " today", " on the app", " on the website", " from my phone", " quickly", " again"),
)


def make_near_duplicates(out: Path, n: int, n_queries: int, seed: int = 7) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def draw(count: int) -> list[str]:
        picks = [rng.integers(len(part), size=count) for part in NEAR_DUPLICATE_PARTS]
        return [f"{a} {b} {c}{d}" for a, b, c, d in zip(*(np.asarray(part, dtype=object)[p]
                                                         for part, p in zip(NEAR_DUPLICATE_PARTS, picks)))]

    texts = draw(n)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    (out / "queries.txt").write_text("".join(t + "\n" for t in draw(n_queries)), encoding="utf-8")
    print(f"{n} documents, {len(set(texts))} distinct texts -> {out}")


def make_data(pairs: list[str], out: Path, n: int, n_add: int, n_queries: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    questions = list(dict.fromkeys(doc.text for path in pairs
                                   for _, doc in iter_documents(path, bad_lines=BadLines("skip"))))
    rng = np.random.default_rng(7)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            base, variant = questions[i % len(questions)], i // len(questions)
            text = base if variant == 0 else f"{base} {variant + 1}"
            fh.write(json.dumps({"id": f"d{i}", "text": text}, ensure_ascii=False) + "\n")
    with open(out / "add.jsonl", "w", encoding="utf-8") as fh:
        for j, i in enumerate(rng.choice(len(questions), n_add, replace=False)):
            fh.write(json.dumps({"id": f"new{j}", "text": f"{questions[i]} new"}, ensure_ascii=False) + "\n")
    picked = rng.choice(len(questions), n_queries, replace=False)
    (out / "queries.txt").write_text("".join(questions[i] + "\n" for i in picked), encoding="utf-8")
    print(f"{n} documents from {len(questions)} distinct questions -> {out}")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_add(index_dir: Path, docs_path: Path) -> dict:
    docs = [doc for _, doc in iter_documents(docs_path)]
    start = time.perf_counter()
    index = LocalIndex.open(index_dir)
    encoder = Encoder.load(index.model_dir)
    opened = time.perf_counter()
    report = index.ingest(docs, encoder, show_progress=False)
    done = time.perf_counter()
    return {"documents_before": index.count() - report.indexed, "added": report.indexed,
            "open_and_model_s": opened - start, "ingest_s": done - opened, "total_s": done - start,
            "segments": len(index.segments), "peak_rss_mb": peak_rss_mb()}


def bench_query(index_dir: Path, queries_path: Path, limit: int) -> dict:
    queries = [q.strip() for q in queries_path.read_text(encoding="utf-8").splitlines() if q.strip()][:limit]
    index = LocalIndex.open(index_dir)
    encoder = Encoder.load(index.model_dir)
    searcher = HybridSearcher(index, encoder)
    vectors = encoder.encode(queries, show_progress=False)
    index.bm25(queries[0], 100)  # warm-up: FAISS parts and vocabularies load on first use
    index.knn(vectors[0], 100)
    out = {"documents": index.count(), "segments": len(index.segments), "queries": len(queries)}
    for name, call in (("bm25", lambda q, v: index.bm25(q, 100)), ("knn", lambda q, v: index.knn(v, 100)),
                       ("hybrid", lambda q, v: searcher.search(q, mode="hybrid", top_k=10))):
        times, cpu = [], []
        for q, v in zip(queries, vectors):
            start, cpu_start = time.perf_counter(), time.thread_time()
            call(q, v)
            cpu.append(time.thread_time() - cpu_start)
            times.append(time.perf_counter() - start)
        # CPU time of this thread: steadier than wall time on a busy machine (hybrid's kNN half runs on a worker)
        out[name] = {**latency_summary(times), "cpu_p50_ms": float(np.median(cpu) * 1000)}
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def bench_bm25(corpus: Path, queries_path: Path, limit: int) -> dict:
    import bm25s

    from hybrid_qpr.backends.local import bm25 as bm25_lib
    from hybrid_qpr.text import tokenize

    tokens = [tokenize(doc.text) for _, doc in iter_documents(corpus)]
    start = time.perf_counter()
    postings = bm25_lib.build_postings(tokens)
    ours_build = time.perf_counter() - start
    start = time.perf_counter()
    reference = bm25s.BM25(k1=bm25_lib.BM25_K1, b=bm25_lib.BM25_B)
    reference.index(tokens, show_progress=False)
    bm25s_build = time.perf_counter() - start
    parts = [(postings, None)]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    queries = [tokenize(doc.text) for _, doc in iter_documents(queries_path)][:limit]
    known = [[t for t in q if t in reference.vocab_dict] for q in queries]
    out = {"documents": len(tokens), "queries": len(queries), "build_s": {"postings": ours_build, "bm25s": bm25s_build}}
    for name, call in (("postings", lambda i: bm25_lib.score_segments(parts, queries[i], stats, weights)),
                       ("bm25s", lambda i: reference.get_scores(known[i]) if known[i] else None)):
        times = []
        for i in range(len(queries)):
            start = time.perf_counter()
            call(i)
            times.append(time.perf_counter() - start)
        out[name] = latency_summary(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    data = sub.add_parser("data")
    data.add_argument("pairs", nargs="+")
    data.add_argument("--out", type=Path, required=True)
    data.add_argument("--n", type=int, default=1_000_000)
    data.add_argument("--add", type=int, default=1_000)
    data.add_argument("--queries", type=int, default=300)
    dups = sub.add_parser("dups")
    dups.add_argument("--out", type=Path, required=True)
    dups.add_argument("--n", type=int, default=300_000)
    dups.add_argument("--queries", type=int, default=300)
    add = sub.add_parser("add")
    add.add_argument("index", type=Path)
    add.add_argument("--docs", type=Path, required=True)
    query = sub.add_parser("query")
    query.add_argument("index", type=Path)
    query.add_argument("--queries", type=Path, required=True)
    query.add_argument("--limit", type=int, default=300)
    bm25 = sub.add_parser("bm25")
    bm25.add_argument("corpus", type=Path)
    bm25.add_argument("--queries", type=Path, required=True)
    bm25.add_argument("--limit", type=int, default=1000)
    args = parser.parse_args()
    if args.step == "data":
        make_data(args.pairs, args.out, args.n, args.add, args.queries)
    elif args.step == "dups":
        make_near_duplicates(args.out, args.n, args.queries)
    elif args.step == "bm25":
        print(json.dumps(bench_bm25(args.corpus, args.queries, args.limit), indent=2))
    elif args.step == "add":
        print(json.dumps(bench_add(args.index, args.docs), indent=2))
    else:
        print(json.dumps(bench_query(args.index, args.queries, args.limit), indent=2))


if __name__ == "__main__":
    main()
