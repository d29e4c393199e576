"""What several benchmark scripts share: result paths recorded relative to the repository root
(so a committed result does not carry the directories of the machine it ran on:
``onnx/sdml-cnn-quora``, ``../shared/data/quora-pairs.tsv.gz``), the command line for a result
file, and the Quora slice, query reader and quality figures more than one script measures on.

The scripts run as ``python benchmarks/X.py`` with hybrid-qpr installed (editable or wheel);
Python puts ``benchmarks/`` on the path, so they import this module as ``_common``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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


def graph_query_arguments(parser: argparse.ArgumentParser) -> None:
    """The queries of a benchmark that times HNSW graph searches: ``--queries``, ``--n``, ``--k``."""
    parser.add_argument("--queries", type=Path, required=True, help="one query per line")
    parser.add_argument("--n", type=int, default=300, help="queries (seeded sample)")
    parser.add_argument("--k", type=int, default=30, help="hits per search (a hybrid query's depth)")


def graph_child_arguments(parser: argparse.ArgumentParser, kinds: Sequence[str]) -> None:
    """The options of a benchmark that times HNSW graph searches in child processes, one
    ``--child`` kind each (``bench_graph_pages.py``, ``bench_graph_fp16.py``)."""
    graph_query_arguments(parser)
    parser.add_argument("--passes", type=int, default=2, help="times over the queries in each process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="JSON file for the runs")
    parser.add_argument("--child", choices=kinds, help=argparse.SUPPRESS)


def alternating_children(commands: Callable[[str], list[list[str]]], kinds: Sequence[str],
                         rounds: int) -> Iterator[tuple[int, str, int, dict]]:
    """Run ``commands(kind)`` (each a script and its arguments) for every kind, ``rounds``
    times, the kinds in order in odd rounds and reversed in even ones, so that a drift of the
    machine falls on all alike; yield (round from 1, kind, the command's position, the JSON
    the child printed last)."""
    for round_number in range(rounds):
        for kind in kinds if round_number % 2 == 0 else kinds[::-1]:
            for position, command in enumerate(commands(kind)):
                done = subprocess.run([sys.executable, *command], capture_output=True, text=True, check=True)
                yield round_number + 1, kind, position, json.loads(done.stdout.strip().splitlines()[-1])


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


def index_query_parser(doc: str | None, *, depth: int, rounds: int):
    """The command line of a benchmark over one local index and a query file: ``INDEX``,
    ``--queries``, ``--depth``, ``--rounds``, ``--out``; the caller adds its own options."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a local index directory")
    parser.add_argument("--queries", type=Path, required=True, help="one query per line (or a BEIR queries.jsonl)")
    parser.add_argument("--depth", type=int, default=depth, help=f"list depth [default: {depth}]")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"timing rounds [default: {rounds}]")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    return parser


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
