"""The write side of a cluster index: ``ingest`` (encode, bulk-write, read back) and ``delete``.

``ClusterBackend.ingest`` and ``.delete`` are these functions; they live here so that the
backend module keeps the index facts and the read side.

Ingest threads: encoding runs ahead of the writer in one worker thread (``read_ahead``). That
thread spends its time inside onnxruntime, and a process that exits while it is there aborts
natively ("terminate called without an active exception", exit 134). So on every way out of an
ingest - success, an error, Ctrl-C - the worker is told to stop and joined before the error
travels on. The ``_bulk`` requests in flight are sent by ``write_bulk``'s own threads, which it
joins when it ends.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Full, Queue
from typing import TypeVar

from hybrid_qpr.backends.base import IngestReport
from hybrid_qpr.backends.cluster import loading
from hybrid_qpr.backends.cluster.bodies import METADATA_FIELD, TEXT_FIELD, VECTOR_FIELD, bm25_tokens
from hybrid_qpr.backends.cluster.bulk import BulkAction, BulkStats, RetryPolicy, VersionClock, write_bulk
from hybrid_qpr.backends.cluster.connection import missing_index
from hybrid_qpr.backends.cluster.target import ClusterIndex
from hybrid_qpr.distance import prepare_vectors
from hybrid_qpr.errors import BackendError, ConfigError, SkippedLine
from hybrid_qpr.types import Document


logger = logging.getLogger(__name__)

T = TypeVar("T")
READ_AHEAD_BATCHES = 4  # encoded batches an ingest keeps ready while it sends or waits
# An ingest's documents per _bulk request and requests in flight: one shard indexes one request
# per write thread, so more requests keep the node indexing while an answer travels and the next
# request is assembled; 1,000 and 4 were both engines' best against their bare _bulk rate on an
# idle machine (docs/opensearch.md, "Bulk loading against the node's own rate")
BULK_BATCH_SIZE, BULK_IN_FLIGHT = 1000, 4
# _mget requests of an ingest's read-back at once: one at a time was 15-18% of a 120,000-document
# ingest on an idle machine (docs/opensearch.md)
READ_BACK_IN_FLIGHT = 4
# how long an ending ingest waits for the encoding thread to finish the batch it is on
WORKER_JOIN_SECONDS = 120.0
Written = Mapping[str, tuple[int, bytes, int | None]]  # id -> (version, text digest, line) of its newest write


def ingest(backend: ClusterIndex, documents: Iterable[Document | tuple[int, Document]], encoder, *,
           batch_size: int = BULK_BATCH_SIZE, rejects_path: str | Path | None = None, show_progress: bool = True,
           max_retries: int = 6, initial_backoff: float = 0.5, max_backoff: float = 30.0, shards: int | None = None,
           replicas: int | None = None, bulk_timeout: float | None = None,
           in_flight: int = BULK_IN_FLIGHT) -> IngestReport:
    """What ``ClusterBackend.ingest`` does (its docstring says it)."""
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size}: must be >= 1")
    if bulk_timeout is not None and bulk_timeout <= 0:
        raise ConfigError(f"bulk_timeout={bulk_timeout}: must be > 0 seconds")
    report = IngestReport(rejects_path=str(rejects_path) if rejects_path else None)
    start = time.monotonic()
    created = backend.ensure_index(encoder, shards=shards, replicas=replicas)
    analyzer, field = backend.analyzer, backend.bm25_field  # read once: each costs a look at the mapping
    restore = loading.begin(backend, created)
    try:
        backend.refresh_index()
        count_before = backend.count()
    except BaseException:
        loading.end(backend, restore, failing=True)
        raise
    total = len(documents) if hasattr(documents, "__len__") else None  # type: ignore[arg-type]
    clock = VersionClock()
    written: dict[str, tuple[int, bytes, int | None]] = {}
    lines_written = 0

    def actions() -> Iterator[BulkAction]:
        for batch in _batches(_writable(documents, backend, report.skipped), batch_size):
            vectors = prepare_vectors(encoder.encode([doc.text for _, doc in batch], batch_size=batch_size,
                                                     side="document"), encoder.distance)
            for (line, doc), vector in zip(batch, vectors):
                source = {TEXT_FIELD: doc.text, VECTOR_FIELD: vector, METADATA_FIELD: doc.metadata}
                if field != TEXT_FIELD:
                    source[field] = bm25_tokens(doc.text, analyzer)
                action = BulkAction("index", doc.id, source, line, clock.next())
                action.ndjson(backend.index)  # serialized here, in the encoding thread, while the writer waits
                yield action

    stats = BulkStats()

    def results() -> Iterator[None]:
        nonlocal lines_written
        retry = RetryPolicy(max_retries, initial_backoff, max_backoff)
        encoded = read_ahead(actions(), (READ_AHEAD_BATCHES + in_flight) * batch_size)
        timeout = bulk_timeout or max(60.0, backend.request_timeout or 0)
        try:
            for outcome in write_bulk(backend.transport, backend.index, encoded, chunk_size=batch_size, retry=retry,
                                      timeout=timeout, stats=stats, in_flight=in_flight):
                action = outcome.action
                if not outcome.ok:
                    report.failed.append({"id": action.id, "line": action.line, "status": outcome.status,
                                          "error": outcome.error})
                else:
                    lines_written += 1
                    newest = written.get(action.id)
                    if newest is None or action.version > newest[0]:
                        written[action.id] = (action.version, text_digest(action.source[TEXT_FIELD]), action.line)
                yield None
        finally:
            encoded.close()  # stops and joins the encoding thread, on an error too

    writing = results()
    progress: Iterable[None] = writing
    if show_progress:
        from hybrid_qpr.progress import track

        progress = track(writing, total=total, description=f"indexing into {backend.index}")
    try:
        for _ in progress:
            pass
    except BaseException:
        writing.close()
        loading.end(backend, restore, failing=True)
        raise
    writing.close()
    loading.end(backend, restore)

    backend.refresh_index()
    unmatched = list(_unmatched(backend, written))
    for doc_id, problem in unmatched:
        report.failed.append({"id": doc_id, "line": written[doc_id][2], "status": None, "error": problem})
    lines_written -= len(unmatched)
    if report.failed and rejects_path:
        from hybrid_qpr.artifacts import write_jsonl

        write_jsonl(rejects_path, report.failed)
    report.verified = len(written) - len(unmatched)
    report.indexed = min(max(0, backend.count() - count_before), report.verified)
    report.updated = lines_written - report.indexed
    report.retried_requests, report.retried_documents = stats.retried_requests, stats.retried_actions
    report.retry_wait_seconds = stats.wait_seconds
    report.seconds = time.monotonic() - start
    report.notes.append(f"verified {report.verified} ids with their texts; retries: {report.retried_requests} requests "
                        f"and {report.retried_documents} documents sent again, {report.retry_wait_seconds:.1f} s waiting")
    if stats.retries:
        logger.info("ingest into %s: %d requests and %d documents sent again, %.1f s waiting (smallest request %d)",
                    backend.index, stats.retried_requests, stats.retried_actions, stats.wait_seconds,
                    stats.smallest_chunk)
    return report


def _unmatched(backend: ClusterIndex, written: Written, batch: int = 1000,
               in_flight: int = READ_BACK_IN_FLIGHT) -> Iterator[tuple[str, str]]:
    """``(id, problem)`` for each id of ``written`` that the index does not hold with the
    text whose digest is recorded (read back with ``_mget``, ``batch`` ids at a time,
    ``in_flight`` requests at once)."""
    ids = list(written)

    def read(chunk: list[str]) -> dict:
        return backend.request("POST", backend.path("_mget"), {"ids": chunk}, {"_source_includes": TEXT_FIELD},
                               what="reading back the documents written")

    with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="hybrid-qpr-read-back") as pool:
        for response in pool.map(read, [ids[start:start + batch] for start in range(0, len(ids), batch)]):
            for doc in response["docs"]:
                if not doc.get("found"):
                    yield doc["_id"], "acknowledged but missing from the index after the ingest; re-run the ingest"
                elif text_digest(doc.get("_source", {}).get(TEXT_FIELD, "")) != written[doc["_id"]][1]:
                    yield doc["_id"], ("the index holds another text for this id (another writer changed it during "
                                       "the ingest); re-run the ingest to write this file's version")


def delete(backend: ClusterIndex, ids: Sequence[str]) -> int:
    """What ``ClusterBackend.delete`` does."""
    if not backend.exists():
        raise missing_index("deleting documents", backend.index, backend.engine)
    deleted = 0
    for outcome in write_bulk(backend.transport, backend.index,
                              (BulkAction("delete", i) for i in dict.fromkeys(ids))):
        if not outcome.ok:
            raise BackendError(f"deleting {outcome.action.id!r} from {backend.index!r} failed: {outcome.error}")
        deleted += outcome.result == "deleted"
    backend.refresh_index()
    return deleted


def text_digest(text: str) -> bytes:
    """8 bytes that tell one text from another (for checking what an ingest wrote without
    keeping the texts)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def read_ahead(items: Iterable[T], depth: int) -> Iterator[T]:
    """``items`` produced by a thread up to ``depth`` ahead of the consumer, so producing (here:
    encoding, which releases the GIL in onnxruntime) overlaps with consuming (sending, waiting).
    An exception in the producer is raised in the consumer. Closing the generator (``close()``,
    which the ingest does on every path) stops the producer after the item it is on and waits
    for its thread to end."""
    queue: Queue = Queue(maxsize=max(1, depth))
    stop = threading.Event()
    done = object()

    def hand(entry: tuple) -> bool:
        """Queue ``entry`` unless the consumer stopped (never blocks past the stop)."""
        while not stop.is_set():
            try:
                queue.put(entry, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not hand((item, None)):
                    return
            hand((done, None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            hand((done, exc))

    worker = threading.Thread(target=produce, name="hybrid-qpr-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item, error = queue.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        worker.join(timeout=WORKER_JOIN_SECONDS)
        if worker.is_alive():
            logger.warning("the encoding thread did not stop within %.0f s (input still being read?)",
                           WORKER_JOIN_SECONDS)


def _writable(documents: Iterable[Document | tuple[int, Document]], backend: ClusterIndex,
              skipped: list[SkippedLine]) -> Iterator[tuple[int, Document]]:
    """``documents`` as ``(line, Document)``, without those the backend would not index (``document_problem``):
    each of those is added to ``skipped`` with its line, like any other bad input line.
    A plain ``Document`` is numbered by its position in ``documents`` (from 1)."""
    for position, item in enumerate(documents, 1):
        line, doc = (position, item) if isinstance(item, Document) else item  # a Document is a tuple too
        problem = backend.document_problem(doc)
        if problem:
            skipped.append(SkippedLine(None, line, problem))
            continue
        yield line, doc


def _batches(documents: Iterable[tuple[int, Document]], size: int) -> Iterator[list[tuple[int, Document]]]:
    batch: list[tuple[int, Document]] = []
    for item in documents:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
