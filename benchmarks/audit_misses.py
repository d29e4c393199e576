"""How many of an encoder's top-1 misses are unlabelled paraphrases? A label-noise audit.

Quora-layout data lists only the duplicate pairs someone labelled, so a test query's cluster
misses paraphrases that were never paired with it. When exact kNN ranks such a paraphrase first,
MRR@20 counts a miss although the answer is right. This script finds the misses of a seeded
sample of test queries and either writes them out for a person to judge, or reads the judgments
and reports what share of the misses are paraphrases (with a 95% Wilson interval) and the H@1 the
sample would have if those counted as hits.

Step 1, list the misses (texts go to REVIEW, outside the repository: they are the data's text):

    python benchmarks/audit_misses.py --dataset data/quora --encoder onnx/minilm-l6-quora-int8 \\
        --cache WORKDIR/quality-cache --queries 1000 --review WORKDIR/misses.jsonl

Step 2, judge them: a TSV with a header and rows ``query-id<TAB>top1-id<TAB>verdict``, verdict
``paraphrase`` (the top hit asks the same thing: one answer serves both) or ``different``; then

    python benchmarks/audit_misses.py ... --labels benchmarks/results/audit-misses-quora.tsv \\
        --out benchmarks/results/audit-misses-quora.json

Vectors are the cached corpus vectors of ``bench_quality.py`` (same cache, same key), so a model
measured there is not encoded again. The labels file holds ids only.

With ``--index IDX`` the top hit is the one a user gets instead: the index's hybrid search (its
tuned fusion), and with ``--reranker DIR`` that hybrid's top ``--reranker-depth`` re-ranked by the
cross-encoder (no --encoder or --cache then):

    python benchmarks/audit_misses.py --dataset data/quora --index IDX --reranker RERANKER \
        --reranker-depth 20 --queries 1000 --review WORKDIR/misses.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from pathlib import Path

import numpy as np

from _common import repo_relative
from bench_quality import encoded_corpus, knn_lists
from hybrid_qpr.artifacts import atomic_write, write_json
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.encoders import Encoder

VERDICTS = ("paraphrase", "different")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (sound at small n and near 0 or 1)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def read_labels(path: str) -> dict[tuple[str, str], str]:
    labels: dict[tuple[str, str], str] = {}
    with open(path, newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        header = next(rows, None)
        if header != ["query-id", "top1-id", "verdict"]:
            raise SystemExit(f"{path}: line 1: expected the header query-id, top1-id, verdict; got {header}")
        for line, row in enumerate(rows, start=2):
            if len(row) != 3 or row[2] not in VERDICTS:
                raise SystemExit(f"{path}: line {line}: expected query-id, top1-id and one of {VERDICTS}; got {row}")
            labels[(row[0], row[1])] = row[2]
    return labels


def searched_lists(args, texts: list[str]) -> list:
    """The top hits of the index's hybrid search for each text (re-ranked with --reranker)."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.search import HybridSearcher

    index = LocalIndex.open(args.index)
    searcher = HybridSearcher(index, Encoder.load(index.model_dir), reranker=args.reranker,
                              reranker_depth=args.reranker_depth)
    return [searcher.search(text, mode="hybrid", top_k=2) for text in texts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset directory (its beir/ is read)")
    ap.add_argument("--encoder", help="model directory (exact kNN; without --index)")
    ap.add_argument("--cache", help="bench_quality.py's vector cache directory (with --encoder)")
    ap.add_argument("--index", help="local index of the corpus: audit its tuned hybrid search instead of exact kNN")
    ap.add_argument("--reranker", help="with --index: cross-encoder re-ranking the hybrid's top hits")
    ap.add_argument("--reranker-depth", type=int, default=20)
    ap.add_argument("--split", default="test")
    ap.add_argument("--queries", type=int, default=1000, help="seeded sample of queries")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--review", help="write the misses with their texts here (JSONL) for judging")
    ap.add_argument("--labels", help="TSV of judgments (query-id, top1-id, verdict)")
    ap.add_argument("--out", help="JSON summary (with --labels)")
    args = ap.parse_args()
    if (args.index is None) == (args.encoder is None or args.cache is None):
        ap.error("give --encoder and --cache (exact kNN), or --index (the index's hybrid search)")

    corpus, queries, qrels = load_beir(f"{args.dataset}/beir", args.split)
    judged = sorted(q for q in queries if qrels.get(q))
    sample = random.Random(args.seed).sample(judged, min(args.queries, len(judged)))
    if args.index:
        lists = searched_lists(args, [queries[q] for q in sample])
    else:
        ids, texts = list(corpus), list(corpus.values())
        row_of = {doc_id: i for i, doc_id in enumerate(ids)}
        enc = Encoder.load(args.encoder, threads=2)
        vectors, _ = encoded_corpus(enc, ids, texts, Path(args.cache), {}, workers=1, threads=2)
        lists = knn_lists(np.array([row_of[q] for q in sample]), vectors, ids, enc.distance, depth=2)
    misses = []
    for qid, hits in zip(sample, lists):
        top = next(h for h in hits if h.id != qid)  # the query is a corpus question: drop its own row
        if top.id not in qrels[qid]:
            misses.append((qid, top.id))
    print(f"{len(misses)} top-1 misses in {len(sample)} {args.split} queries "
          f"(H@1 {1 - len(misses) / len(sample):.3f})")
    if args.review:
        with atomic_write(args.review, "w") as fh:
            for qid, top in misses:
                mate = sorted(qrels[qid])[0]
                fh.write(json.dumps({"query-id": qid, "top1-id": top, "query": queries[qid], "top1": corpus[top],
                                     "labelled_paraphrase": corpus[mate]}) + "\n")
        print(f"misses written to {args.review}")
    if not args.labels:
        return
    labels = read_labels(args.labels)
    verdicts = [labels[m] for m in misses if m in labels]
    paraphrases = verdicts.count("paraphrase")
    low, high = wilson(paraphrases, len(verdicts))
    summary = {
        "dataset": repo_relative(args.dataset), "split": args.split,
        **({"encoder": repo_relative(args.encoder)} if args.encoder else
           {"index": repo_relative(args.index), "search": "hybrid (the index's tuned fusion)",
            **({"reranker": repo_relative(args.reranker), "reranker_depth": args.reranker_depth} if args.reranker else {})}),
        "queries": len(sample), "seed": args.seed, "misses": len(misses), "judged": len(verdicts),
        "paraphrase": paraphrases, "paraphrase_share": round(paraphrases / max(1, len(verdicts)), 3),
        "paraphrase_share_95ci": [round(low, 3), round(high, 3)],
        "h@1_labelled": round(1 - len(misses) / len(sample), 4),
        # every miss counted a hit in the share the judged sample shows
        "h@1_if_paraphrases_count": round(
            1 - len(misses) * (1 - paraphrases / max(1, len(verdicts))) / len(sample), 4),
        "labels": repo_relative(args.labels),
    }
    if len(verdicts) < len(misses):
        summary["note"] = f"{len(misses) - len(verdicts)} misses not judged; the share is of the judged ones"
    print(json.dumps(summary, indent=1))
    if args.out:
        write_json(args.out, summary)


if __name__ == "__main__":
    main()
