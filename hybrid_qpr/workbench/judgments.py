"""The workbench's judgments: relevance labels a person gave to hits, kept beside the index.

The store directory is a BEIR eval set (the layout ``hybrid_qpr.data.beir`` reads and writes),
so ``hybrid-qpr tune --beir DIR --split val`` and ``evaluate`` take it as it is::

    corpus.jsonl      the judged documents (id and text, as they were when judged)
    queries.jsonl     {"_id": "wb-...", "text": "how do i reset my password"} per judged query
    qrels/val.tsv     query-id <TAB> corpus-id <TAB> score (0 not relevant, 1 relevant, 2 highly)

A query's id is derived from its text (whitespace collapsed), so judging the same query again
finds the same id. A judgment of a (query, document) pair replaces the earlier one: last
write wins. Every write rewrites the files atomically (``hybrid_qpr.artifacts.atomic_write``:
a temporary file, fsync, rename), qrels last, so a kill -9 at any moment leaves the previous
or the new judgments, never a torn file; an ``flock`` on ``.lock`` keeps two servers on one
store from losing each other's writes (each write re-reads the files under the lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hybrid_qpr.artifacts import iter_jsonl
from hybrid_qpr.data.beir import load_qrels, write_beir_files
from hybrid_qpr.errors import ConfigError, InputError

SPLIT = "val"  # what 'hybrid-qpr tune' tunes on by default
LOCK_FILE = ".lock"
RELEVANCE_LEVELS = (0, 1, 2)

def normalize_query(text: str) -> str:
    """The query as it is stored and matched: whitespace runs collapsed, ends stripped."""
    return " ".join(text.split())


def query_id(text: str) -> str:
    """A stable id for a query text (never equal to a document id of a normal corpus, so the
    evaluator's 'drop the query's own id' rule never removes a judged document)."""
    return "wb-" + hashlib.sha1(normalize_query(text).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Judgments:
    """A snapshot of the store: query id -> text, query id -> {document id: relevance}, and
    the judged documents' texts."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    documents: dict[str, str]

    @property
    def count(self) -> int:
        return sum(len(docs) for docs in self.qrels.values())

    def judged_queries(self) -> dict[str, str]:
        """The queries with at least one relevant (> 0) judgment: the ones tuning can learn from."""
        return {q: self.queries[q] for q in sorted(self.qrels)
                if q in self.queries and any(g > 0 for g in self.qrels[q].values())}


class JudgmentStore:
    """Judgments in ``directory`` (module docstring); safe to share between threads."""

    FILES = ("corpus.jsonl", "queries.jsonl", f"qrels/{SPLIT}.tsv")

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._thread_lock = threading.Lock()
        self._cached: tuple[tuple, Judgments] | None = None

    def load(self) -> Judgments:
        """The stored judgments (empty when nothing was judged yet). Every search answer
        carries its query's judgments, so the files are parsed again only when one of them
        was replaced since the last load (by this process or another)."""
        stamp = tuple(self._stamp(name) for name in self.FILES)
        cached = self._cached
        if cached is not None and cached[0] == stamp:
            return cached[1]
        qrels_path = self.directory / self.FILES[2]
        qrels = load_qrels(qrels_path) if qrels_path.is_file() else {}
        judgments = Judgments(self._texts("queries.jsonl"), qrels, self._texts("corpus.jsonl"))
        self._cached = (stamp, judgments)
        return judgments

    def _stamp(self, name: str) -> tuple[int, int, int] | None:
        try:
            info = (self.directory / name).stat()
        except FileNotFoundError:
            return None
        return info.st_ino, info.st_mtime_ns, info.st_size

    def _texts(self, name: str) -> dict[str, str]:
        path = self.directory / name
        if not path.is_file():
            return {}
        out: dict[str, str] = {}
        for line, obj in iter_jsonl(path):
            if not isinstance(obj.get("_id"), str) or not isinstance(obj.get("text"), str):
                raise InputError(path, line, 'expected {"_id": str, "text": str}')
            out[obj["_id"]] = obj["text"]
        return out

    def judge(self, query: str, doc_id: str, relevance: int, doc_text: str = "") -> tuple[str, Judgments]:
        """Store ``relevance`` for (``query``, ``doc_id``), replacing an earlier judgment of the
        pair; returns the query's id and the judgments after the write."""
        if isinstance(relevance, bool) or relevance not in RELEVANCE_LEVELS:
            raise ConfigError(f"relevance={relevance!r}: must be one of {', '.join(map(str, RELEVANCE_LEVELS))}")
        text = normalize_query(query)
        qid = query_id(text)
        with self._locked():
            current = self.load()
            qrels = {q: dict(docs) for q, docs in current.qrels.items()}
            qrels.setdefault(qid, {})[doc_id] = int(relevance)
            updated = Judgments({**current.queries, qid: text}, qrels, {**current.documents, doc_id: doc_text})
            write_beir_files(  # qrels last: a query or document without qrels is harmless
                self.directory,
                ({"_id": d, "title": "", "text": t} for d, t in sorted(updated.documents.items())),
                ({"_id": q, "text": t} for q, t in sorted(updated.queries.items())),
                {SPLIT: ((q, d, g) for q in sorted(qrels) for d, g in sorted(qrels[q].items()))})
        return qid, updated

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads one at a time, and other processes through ``flock``."""
        with self._thread_lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / LOCK_FILE, "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
