"""What several benchmark scripts share: result paths recorded relative to the repository root
(so a committed result does not carry the directories of the machine it ran on:
``onnx/sdml-cnn-quora``, ``../shared/data/quora-pairs.tsv.gz``), the command line for a result
file, the Quora slice, query reader and quality figures more than one script measures on, and
the seeded corpus subset of a BEIR folder that keeps every document its sampled queries judge.

The scripts run as ``python benchmarks/X.py`` with hybrid-qpr installed (editable or wheel);
Python puts ``benchmarks/`` on the path, so they import this module as ``_common``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the shared data folder beside the project root (../shared/data), as in the docs
DEFAULT_DATA = str(REPO.parent / "shared" / "data" / "quora-pairs.tsv.gz")


def repo_relative(path: str | Path) -> str:
    """``path`` relative to the repository root, with ``/`` separators."""
    return Path(os.path.relpath(Path(path).resolve(), REPO)).as_posix()


def relative_if_path(value: object) -> object:
    """``repo_relative(value)`` for an absolute path (a ``Path`` or a string starting with
    ``/``); any other value unchanged. For recording argparse settings."""
    if isinstance(value, Path) or (isinstance(value, str) and os.path.isabs(value)):
        return repo_relative(value)
    return value


def command_line() -> str:
    """The command that ran this benchmark, for its result file, with absolute paths made
    repository-relative."""
    return "python " + " ".join(str(relative_if_path(arg)) for arg in sys.argv)


def record_ab(out: Path, result: dict, modes: Sequence[str], p50: Callable[[str, str], float], what: str) -> None:
    """An A/B run's ``what`` (ms) per mode and side, ``p50(side, mode)``, put into ``result``
    and printed with B's change, and ``result`` appended to the runs in ``out``."""
    for mode in modes:
        a, b = p50("A", mode), p50("B", mode)
        change = f"{(b / a - 1) * 100:+.1f}%"
        result[mode] = {f"a_{what}_ms": round(a, 3), f"b_{what}_ms": round(b, 3), "change": change}
        print(f"{mode:7s} A {what} {a:.3f} ms  B {what} {b:.3f} ms  ({change})")
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"] if out.exists() else []
    out.write_text(json.dumps({"command": command_line(), "runs": [*runs, result]}, indent=1) + "\n", encoding="utf-8")


def cluster_backend(engine: str, url: str, index: str, timeout: float = 60.0):
    """The OpenSearch or Elasticsearch backend of ``index`` at ``url`` (default options)."""
    import importlib

    module = importlib.import_module(f"hybrid_qpr.backends.{engine}")
    backend_cls = module.OpenSearchBackend if engine == "opensearch" else module.ElasticsearchBackend
    return backend_cls(module.connect(url, timeout=timeout), index)


def load_pairs_slice(path: str, n_docs: int, n_queries: int, seed: int):
    """``(documents, [(query text, relevant doc id)])`` from a Quora-layout pairs file: the first
    ``n_docs`` unique questions, and as queries the partner questions of duplicate pairs whose
    other side is in the corpus (that side is the one relevant document), shuffled by ``seed``."""
    from hybrid_qpr.data.pairs import iter_pairs
    from hybrid_qpr.errors import BadLines
    from hybrid_qpr.text import text_id
    from hybrid_qpr.types import Document

    docs: dict[str, Document] = {}
    by_text: dict[str, str] = {}
    candidates: list[tuple[str, str]] = []
    for pair in iter_pairs(path, BadLines("skip")):
        for qid, text in ((pair.qid1, pair.question1), (pair.qid2, pair.question2)):
            if len(docs) < n_docs and text not in by_text:
                doc_id = qid or text_id(text)
                docs[doc_id] = Document(doc_id, text)
                by_text[text] = doc_id
        if pair.is_duplicate and pair.question1 in by_text and pair.question2 not in by_text:
            candidates.append((pair.question2, by_text[pair.question1]))
        if len(docs) >= n_docs and len(candidates) >= n_queries * 3:
            break
    random.Random(seed).shuffle(candidates)
    return list(docs.values()), candidates[:n_queries]


def read_queries(path: Path, limit: int, seed: int) -> list[str]:
    """Query texts from a documents JSONL file (its ``text``) or a plain file (one a line);
    ``limit`` of them sampled by ``seed`` when there are more, in file order."""
    import numpy as np

    from hybrid_qpr.data.documents import iter_documents

    if path.suffix == ".jsonl":
        texts = [doc.text for _, doc in iter_documents(path)]
    else:
        texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(texts) > limit:
        texts = [texts[i] for i in sorted(np.random.default_rng(seed).choice(len(texts), limit, replace=False))]
    return texts


def exact_search_quality(enc, corpus: dict, queries: dict, qrels: dict) -> dict:
    """Encode every corpus question and every judged query; exact top 20 by the encoder's
    distance (own id dropped); H@1, H@10, MRR@20 and the corpus encoding time."""
    from hybrid_qpr.evaluation.evaluator import exact_run
    from hybrid_qpr.evaluation.metrics import hits_at_k, mrr_at_k

    ids = list(corpus)
    t0 = time.perf_counter()
    docs = enc.encode([corpus[i] for i in ids], batch_size=512)
    seconds = time.perf_counter() - t0
    qids = [q for q in queries if q in qrels]
    qv = enc.encode([queries[q] for q in qids], batch_size=512)
    run = exact_run(qids, qv, ids, docs, enc.distance, retrieve=20)
    return {"corpus": len(ids), "test_queries": len(qids), "distance": enc.distance,
            "H@1": hits_at_k(run, qrels, 1), "H@10": hits_at_k(run, qrels, 10), "MRR@20": mrr_at_k(run, qrels, 20),
            "corpus_encode_seconds": seconds}


def withheld_ids(beir_dir: Path, used: set[str]) -> set[str]:
    """Every query and document id judged in a qrels file of a split not in ``used``."""
    from hybrid_qpr.data.beir import load_qrels

    ids: set[str] = set()
    for path in sorted((beir_dir / "qrels").glob("*.tsv")):
        if path.stem not in used:
            for query, grades in load_qrels(path).items():
                ids.add(query)
                ids.update(grades)
    return ids


def select_subset(corpus: Mapping[str, str], queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], *,
                  n_queries: int, n_tune: int, n_docs: int, withheld: set[str], seed: int):
    """``(corpus subset, eval query ids, tune query ids)``: seeded disjoint samples of the judged
    queries whose relevant documents are all in the corpus, and a corpus of every document
    they judge or are, filled with other non-withheld documents (seeded) up to ``n_docs``.
    The subset keeps the corpus file's order."""
    from hybrid_qpr.errors import ConfigError

    judged = sorted(q for q in queries if q not in withheld
                    and any(g > 0 for g in qrels[q].values()) and all(d in corpus for d in qrels[q]))
    if not judged:
        raise ConfigError("no judged query has its documents in the corpus")
    random.Random(seed).shuffle(judged)
    eval_ids, tune_ids = judged[:n_queries], judged[n_queries:n_queries + n_tune]
    needed = {d for q in eval_ids + tune_ids for d in qrels[q]} | {q for q in eval_ids + tune_ids if q in corpus}
    others = sorted(d for d in corpus if d not in needed and d not in withheld)
    random.Random(seed + 1).shuffle(others)
    keep = needed | set(others[:max(0, n_docs - len(needed))])
    return {d: t for d, t in corpus.items() if d in keep}, sorted(eval_ids), sorted(tune_ids)
