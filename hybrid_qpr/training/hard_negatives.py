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

Answer datasets get the same treatment (:func:`mine_answer_negatives`): every train sentence of
the dataset goes into the index, each question is searched, and the hits that are not one of its
correct sentences join its labelled wrong ones. SQuAD's labelled negatives are only the other
sentences of the answer's paragraph; the first stage at query time ranks sentences of the whole
corpus, so a reranker trained on paragraph neighbours alone meets unfamiliar mistakes there.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)


def search_both(texts: Sequence[str], queries: Sequence[str], want: Sequence[int],
                miner_model: str | None = None) -> list[list[int]]:
    """For each of ``queries``, the top ``want[i]`` BM25 and kNN hits over ``texts`` in a
    throw-away embedded index, interleaved without repeats, as positions in ``texts``."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.types import Document

    encoder = Encoder.load(miner_model)
    lists = []
    with tempfile.TemporaryDirectory(prefix="hqpr-mine-") as tmp:
        index = LocalIndex.create(Path(tmp) / "index", encoder)
        index.ingest([Document(str(i), text) for i, text in enumerate(texts)], encoder, show_progress=False)
        index.close()
        index = LocalIndex.open(Path(tmp) / "index")
        for query, vector, n in zip(queries, encoder.encode(list(queries)), want):
            picked: list[int] = []
            for pair in zip(index.bm25(query, n), index.knn(vector, n)):
                picked.extend(int(h.id) for h in pair if int(h.id) not in picked)
            lists.append(picked)
        index.close()
    return lists


def interleaved_hits(groups: Sequence[Sequence[str]], queries: Sequence[int], want: Sequence[int],
                     miner_model: str | None = None) -> list[list[tuple[int, int]]]:
    """For cluster ``queries[i]``'s first question, the top ``want[i]`` BM25 and kNN hits over all
    the ``groups``' questions, interleaved without repeats and without the question itself, as
    ``(cluster, position)`` pairs."""
    where = [(c, j) for c, texts in enumerate(groups) for j in range(len(texts))]
    hits = search_both([t for texts in groups for t in texts], [groups[c][0] for c in queries], want, miner_model)
    return [[where[i] for i in found if where[i] != (c, 0)] for c, found in zip(queries, hits)]


def mine_answer_negatives(questions: Sequence[str], positives: Sequence[Sequence[str]], texts: Sequence[str],
                          depth: int, miner_model: str | None = None) -> list[list[str]]:
    """For each question, up to ``depth`` of its BM25 and kNN hits over ``texts`` (a dataset's
    train sentences) that are not among its ``positives``, best first."""
    hits = search_both(texts, questions, [depth + len(p) for p in positives], miner_model)
    mined = []
    for right, found in zip(positives, hits):
        right = set(right)
        mined.append([texts[i] for i in found if texts[i] not in right][:depth])
    logger.info("mined %d hard negatives for %d questions", sum(map(len, mined)), len(mined))
    return mined


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
