"""Hard negatives for a paraphrase cluster, mined by our own engine.

The train clusters' questions are indexed in a throw-away embedded index (``LocalIndex``: BM25
and kNN with the miner encoder, by default the bundled model), and each cluster's first question
is searched in both modes; the top hits that belong to *another* cluster are its negatives,
BM25's and kNN's interleaved (word overlap and meaning overlap, the two ways a first stage
confuses questions). The labels say these are different questions; some are unlabelled
paraphrases (the label noise measured by ``benchmarks/audit_misses.py``), which a cross-encoder
trained on them learns to rank below the labelled ones.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)


def mine_cluster_examples(dataset_dir: str | Path, max_clusters: int | None, seed: int, depth: int,
                          miner_model: str | None = None) -> list[tuple[str, list[str], list[str]]]:
    """``(question, its paraphrases, hard negatives)`` for each train cluster (seeded sample of
    ``max_clusters``) of a ``hybrid-qpr dataset build`` directory."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.search import HybridSearcher
    from hybrid_qpr.training.transformer import pair_groups
    from hybrid_qpr.types import Document

    groups = pair_groups(dataset_dir, max_clusters, seed)
    encoder = Encoder.load(miner_model)
    owner = {}
    documents = []
    for c, texts in enumerate(groups):
        for j, text in enumerate(texts):
            doc_id = f"{c}:{j}"
            owner[doc_id] = c
            documents.append(Document(doc_id, text))
    examples = []
    with tempfile.TemporaryDirectory(prefix="hqpr-mine-") as tmp:
        index = LocalIndex.create(Path(tmp) / "index", encoder)
        index.ingest(documents, encoder, show_progress=False)
        index.close()
        searcher = HybridSearcher(LocalIndex.open(Path(tmp) / "index"), encoder)
        firsts = [texts[0] for texts in groups]
        vectors = encoder.encode(firsts)
        for c, (texts, vector) in enumerate(zip(groups, vectors)):
            want = depth + len(texts)
            bm25 = [h.id for h in searcher.backend.bm25(texts[0], want)]
            knn = [h.id for h in searcher.backend.knn(vector, want)]
            picked: list[str] = []
            for pair in zip(bm25, knn):
                for doc_id in pair:
                    if owner[doc_id] != c and doc_id not in picked:
                        picked.append(doc_id)
            negatives = [groups[owner[d]][int(d.split(":")[1])] for d in picked[:depth]]
            examples.append((texts[0], texts[1:], negatives))
        searcher.backend.close()
    logger.info("%s: mined %d hard negatives for %d clusters", dataset_dir, sum(len(e[2]) for e in examples),
                len(examples))
    return examples
