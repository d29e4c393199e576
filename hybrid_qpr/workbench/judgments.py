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

A line of these files that cannot be read (edited by hand, written by another tool) never stops
the workbench: it is skipped, logged and listed in ``Judgments.skipped``; before the next write
replaces a file holding such lines, the file is kept whole as ``NAME.unreadable-STAMP`` beside it,
so nothing is lost. Temporary files a killed writer left behind are removed when a server opens
the store (``remove_leftovers``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hybrid_qpr.artifacts import iter_jsonl, open_text, skip_undecodable
from hybrid_qpr.data.beir import load_qrels, normalize_query, query_id, write_beir_files
from hybrid_qpr.errors import BadLines, ConfigError, HybridQPRError, SkippedLine
from hybrid_qpr.text.ids import id_problem

logger = logging.getLogger(__name__)

SPLIT = "val"  # what 'hybrid-qpr tune' tunes on by default
LOCK_FILE = ".lock"
RELEVANCE_LEVELS = (0, 1, 2)

@dataclass(frozen=True)
class Judgments:
    """A snapshot of the store: query id -> text, query id -> {document id: relevance}, and
    the judged documents' texts."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    documents: dict[str, str]
    skipped: tuple[SkippedLine, ...] = ()

    @property
    def count(self) -> int:
        return sum(len(docs) for docs in self.qrels.values())

    def judged_queries(self) -> dict[str, str]:
        """The queries with at least one relevant (> 0) judgment: the ones tuning can learn from."""
        return {q: self.queries[q] for q in sorted(self.qrels)
                if q in self.queries and any(g > 0 for g in self.qrels[q].values())}


class JudgmentStoreError(HybridQPRError):
    """A judgment could not be written: the store's device is full or the store may not be
    written. ``status`` is the workbench's answer (507 Insufficient Storage, 503 otherwise);
    what was stored before is unchanged and reads go on."""

    def __init__(self, message: str, status: int):
        self.status = status
        super().__init__(message)


_SPACE_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is used up",
                 errno.EFBIG: "a file reached this process's file-size limit (ulimit -f)"}


def store_refusal(exc: OSError, directory: Path) -> JudgmentStoreError:
    """The one-line refusal of a judgment write that failed with ``exc``."""
    where = exc.filename or directory
    if exc.errno in _SPACE_ERRNOS:
        cause, status, fix = _SPACE_ERRNOS[exc.errno], 507, "free space on that device, then judge again"
    elif exc.errno == errno.EROFS:
        cause, status, fix = "the store is on a read-only file system", 503, "start serve with --judgments on a writable directory"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        cause, status, fix = "permission denied", 503, "let this user write the store, or start serve with another --judgments"
    else:
        cause, status, fix = exc.strerror or str(exc), 503, "fix the cause, then judge again"
    return JudgmentStoreError(f"the judgment was not stored: writing {where}: {cause}; the judgments stored before are "
                              f"unchanged and searches go on. Fix: {fix}", status)


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
        bad_lines = BadLines("skip")
        qrels_path = self.directory / self.FILES[2]
        qrels = load_qrels(qrels_path, bad_lines) if qrels_path.is_file() else {}
        judgments = Judgments(self._texts("queries.jsonl", bad_lines), qrels, self._texts("corpus.jsonl", bad_lines),
                              tuple(bad_lines.skipped))
        for skipped in judgments.skipped:
            logger.warning("judgments: skipped an unreadable line: %s", skipped)
        self._cached = (stamp, judgments)
        return judgments

    def remove_leftovers(self) -> list[Path]:
        """Remove the temporary files of writes that never finished (a killed server); under
        the lock, so a write in flight in another process keeps its own. Returns what was removed."""
        if not self.directory.is_dir():
            return []
        with self._locked():
            leftovers = [p for folder in (self.directory, self.directory / "qrels") if folder.is_dir()
                         for p in folder.glob(".*.tmp") if p.is_file()]
            for path in leftovers:
                path.unlink(missing_ok=True)
                logger.warning("judgments: removed %s, left by a write that never finished", path)
        return leftovers

    def _stamp(self, name: str) -> tuple[int, int, int] | None:
        try:
            info = (self.directory / name).stat()
        except FileNotFoundError:
            return None
        return info.st_ino, info.st_mtime_ns, info.st_size

    def _texts(self, name: str, bad_lines: BadLines) -> dict[str, str]:
        path = self.directory / name
        if not path.is_file():
            return {}
        out: dict[str, str] = {}
        with open_text(path) as fh:
            for line, obj in iter_jsonl(path, skip_undecodable(fh, bad_lines, header=False), bad_lines):
                ident, text = obj.get("_id"), obj.get("text")
                if not isinstance(ident, str) or not isinstance(text, str):  # (iter_jsonl skips lone surrogates)
                    bad_lines.skip(path, line, 'expected {"_id": str, "text": str}')
                else:
                    out[ident] = text
        return out

    def judge(self, query: str, doc_id: str, relevance: int, doc_text: str = "") -> tuple[str, Judgments]:
        """Store ``relevance`` for (``query``, ``doc_id``), replacing an earlier judgment of the
        pair; returns the query's id and the judgments after the write."""
        if type(relevance) is not int or relevance not in RELEVANCE_LEVELS:
            raise ConfigError(f"relevance={relevance!r}: must be one of {', '.join(map(str, RELEVANCE_LEVELS))}")
        problem = id_problem(doc_id)
        if problem:
            raise ConfigError(problem)
        text = normalize_query(query)
        qid = query_id(text)
        try:
            return qid, self._write(qid, text, doc_id, relevance, doc_text)
        except OSError as exc:
            raise store_refusal(exc, self.directory) from exc

    def _write(self, qid: str, text: str, doc_id: str, relevance: int, doc_text: str) -> Judgments:
        with self._locked():
            current = self.load()
            self._keep_unreadable(current.skipped)
            qrels = {q: dict(docs) for q, docs in current.qrels.items()}
            qrels.setdefault(qid, {})[doc_id] = int(relevance)
            updated = Judgments({**current.queries, qid: text}, qrels, {**current.documents, doc_id: doc_text})
            write_beir_files(  # qrels last: a query or document without qrels is harmless
                self.directory,
                ({"_id": d, "title": "", "text": t} for d, t in sorted(updated.documents.items())),
                ({"_id": q, "text": t} for q, t in sorted(updated.queries.items())),
                {SPLIT: ((q, d, g) for q in sorted(qrels) for d, g in sorted(qrels[q].items()))})
        return updated

    def unreadable_copies(self) -> list[str]:
        """The copies ``_keep_unreadable`` made (paths relative to the store), by name."""
        if not self.directory.is_dir():
            return []
        return sorted(str(p.relative_to(self.directory)) for p in self.directory.rglob("*.unreadable-*"))

    def _keep_unreadable(self, skipped: tuple[SkippedLine, ...]) -> None:
        """Copy each file with skipped lines aside before a write replaces it without them."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for name in sorted({s.path for s in skipped if s.path}):
            source = Path(name)
            if source.is_file():
                kept = source.with_name(f"{source.name}.unreadable-{stamp}")
                shutil.copy2(source, kept)
                logger.warning("judgments: %s had unreadable lines; kept it whole as %s before rewriting it",
                               source, kept)

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
