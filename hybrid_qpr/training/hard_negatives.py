"""A throw-away first stage over question clusters: hard negatives for training and the
candidate lists of a paraphrase dev set, both found by our own engine.

The clusters' questions are indexed in a throw-away embedded index (``LocalIndex``: BM25 and kNN
with the miner encoder, by default the bundled model), and a cluster's first question is searched
in both modes; the hits, BM25's and kNN's interleaved (word overlap and meaning overlap, the two
ways a first stage confuses questions), are

* for training (:func:`mine_cluster_examples`): the hits of *other* clusters, its hard negatives.
  The labels say these are different questions; some are unlabelled paraphrases (the label noise
  measured by hand on Quora misses, docs/reranker.md), which a cross-encoder trained on them learns to
  rank below the labelled ones;
* for a dev set (:func:`cluster_candidates`): all hits but the question itself, what a hybrid
  first stage would hand a reranker, with its own cluster's questions as the relevant ones.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)


def interleaved_hits(groups: Sequence[Sequence[str]], queries: Sequence[int], want: Sequence[int],
                     miner_model: str | None = None) -> list[list[tuple[int, int]]]:
    """For cluster ``queries[i]``'s first question, the top ``want[i]`` BM25 and kNN hits over all
    the ``groups``' questions, interleaved without repeats and without the question itself, as
    ``(cluster, position)`` pairs."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.types import Document

    encoder = Encoder.load(miner_model)
    documents = [Document(f"{c}:{j}", text) for c, texts in enumerate(groups) for j, text in enumerate(texts)]
    lists = []
    with tempfile.TemporaryDirectory(prefix="hqpr-mine-") as tmp:
        index = LocalIndex.create(Path(tmp) / "index", encoder)
        index.ingest(documents, encoder, show_progress=False)
        index.close()
        index = LocalIndex.open(Path(tmp) / "index")
        vectors = encoder.encode([groups[c][0] for c in queries])
        for c, vector, n in zip(queries, vectors, want):
            bm25 = [h.id for h in index.bm25(groups[c][0], n)]
            knn = [h.id for h in index.knn(vector, n)]
            picked: list[str] = []
            for pair in zip(bm25, knn):
                picked.extend(d for d in pair if d != f"{c}:0" and d not in picked)
            lists.append([(int(a), int(b)) for a, b in (d.split(":") for d in picked)])
        index.close()
    return lists


def mine_cluster_examples(dataset_dir: str | Path, max_clusters: int | None, seed: int, depth: int,
                          miner_model: str | None = None) -> list[tuple[str, list[str], list[str]]]:
    """``(question, its paraphrases, hard negatives)`` for each train cluster (seeded sample of
    ``max_clusters``) of a ``hybrid-qpr dataset build`` directory."""
    from hybrid_qpr.training.transformer import pair_groups

    groups = pair_groups(dataset_dir, max_clusters, seed)
    hits = interleaved_hits(groups, range(len(groups)), [depth + len(t) for t in groups], miner_model)
    examples = []
    for c, (texts, found) in enumerate(zip(groups, hits)):
        negatives = [groups[o][j] for o, j in found if o != c][:depth]
        examples.append((texts[0], texts[1:], negatives))
    logger.info("%s: mined %d hard negatives for %d clusters", dataset_dir, sum(len(e[2]) for e in examples),
                len(examples))
    return examples


def cluster_candidates(dataset_dir: str | Path, split: str, max_queries: int | None, seed: int, depth: int,
                       miner_model: str | None = None) -> list[tuple[str, list[str], list[int]]]:
    """``(question, its first-stage candidates, positions of its paraphrases among them)`` for the
    first question of each cluster of ``split`` (a seeded sample of ``max_queries``); the
    candidates are the top ``depth`` interleaved hits over all of the split's questions."""
    import random

    from hybrid_qpr.training.transformer import pair_groups

    groups = pair_groups(dataset_dir, None, seed, split=split)
    queries = list(range(len(groups)))
    if max_queries is not None and max_queries < len(queries):
        queries = sorted(random.Random(seed).sample(queries, max_queries))
    hits = interleaved_hits(groups, queries, [depth] * len(queries), miner_model)
    out = []
    for c, found in zip(queries, hits):
        found = found[:depth]
        out.append((groups[c][0], [groups[o][j] for o, j in found], [i for i, (o, _) in enumerate(found) if o == c]))
    return out
