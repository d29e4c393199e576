"""Bulk writing for both cluster engines, with the one retry layer hybrid-qpr has.

``write_bulk`` sends ``BulkAction``s in ``_bulk`` requests of at most ``chunk_size`` actions
(and about ``max_bytes``) and yields one ``BulkOutcome`` per action, in the style of the
clients' ``streaming_bulk`` helpers (which are not used: each retries in its own way, and a
second retry layer under this one would multiply waits and hide connection loss).

A ``_bulk`` answer carries one status per action (the engines' documented bulk semantics: the
request can succeed while single items fail), so failures come in two sizes:

* a whole request that got no answer (connection refused or reset, timeout) or was answered
  429 / 5xx: all its actions are sent again after a capped exponential backoff, or after the
  answer's ``Retry-After`` when it has one. Nothing is known about what the engine applied
  (a timed-out request may have been applied in full);
* a single action answered 429 (``es_rejected_execution_exception``: a full write queue) or
  5xx inside a successful request: it goes back in line with its own backoff while the
  writer goes on with other actions, so one busy shard does not stall the whole ingest.

An action sent twice can never make a duplicate: writes carry explicit ``_id``s. Index
actions may also carry an external ``version`` (``version_type=external``): the engine then
applies a write only when its version is higher than the stored one, and answers 409
(``version_conflict_engine_exception``) otherwise. A 409 for a versioned write therefore
means "the index already holds this version or a newer one" - the earlier try had been
applied after all, or a later write of the same id came first - and is reported as
``superseded``, not as a failure. That is also what keeps a stale try that the engine
applies late from overwriting a newer text.

Throttling shrinks the request: a request answered 429, or one whose actions came back 429
for half or more, halves the number of actions per request (down to ``MIN_CHUNK``); any other
answered request doubles it back, up to ``chunk_size``. (A few rejected actions in a request
do not shrink it: they are retried on their own, and smaller requests would only mean more of
them.)

Several requests may be in flight at once (``in_flight``, each sent by a thread of its own);
their answers are handled one by one in the order they were sent, so all of the above holds as
with one: an action in two requests at once is impossible, and a retried one carries its version.

After ``max_retries`` consecutive failed requests a ``ClusterError`` says how many actions
were acknowledged and that re-running the same ingest resumes it. An action still rejected
after ``max_retries`` tries, or rejected for a reason retrying cannot fix (a mapping
conflict), becomes a failed outcome: reported, never silently dropped. What the retries
cost is counted in a ``BulkStats``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np

from hybrid_qpr.backends.cluster.connection import HttpFailure, RetryPolicy, Transport, error_for, reason
from hybrid_qpr.backends.cluster.names import index_path
from hybrid_qpr.errors import ClusterError, ConfigError

logger = logging.getLogger(__name__)

BULK_FILTER = "errors,items.*._id,items.*.status,items.*.result,items.*.error"
MAX_BULK_BYTES = 8 * 1024 * 1024
MIN_CHUNK = 8  # the smallest request throttling shrinks to
VERSION_CONFLICT = "version_conflict_engine_exception"


class VersionClock:
    """External versions for index actions: nanoseconds since the epoch, strictly increasing
    within the process, so a later write (in this ingest or a later one) always carries a
    higher version than an earlier one. Fits the engines' signed 64-bit versions until 2262."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return self._last


@dataclass
class BulkAction:
    """One ``index`` (with ``source``) or ``delete`` of document ``id``; ``line`` is the input
    line it came from (for reports); ``version`` makes an index action externally versioned."""

    op: Literal["index", "delete"]
    id: str
    source: dict[str, Any] | None = None
    line: int | None = None
    version: int | None = None
    attempts: int = 0

    encoded: bytes | None = field(default=None, repr=False, compare=False)  # ndjson(), kept once made

    def ndjson(self, index: str) -> bytes:
        """The action's lines of a ``_bulk`` body (made once: the ingest makes them in its
        encoding thread, so the writer only joins them)."""
        if self.encoded is None:
            meta: dict[str, Any] = {"_index": index, "_id": self.id}
            if self.version is not None:
                meta.update(version=self.version, version_type="external")
            header = dumps({self.op: meta})
            self.encoded = header + b"\n" if self.op == "delete" else header + b"\n" + dumps(self.source) + b"\n"
        return self.encoded


@dataclass(frozen=True)
class BulkOutcome:
    """``ok`` with the engine's ``result`` (created, updated, deleted, not_found, or
    ``superseded`` for a versioned write the index already holds), or a failure."""

    action: BulkAction
    ok: bool
    result: str | None
    status: int
    error: str | None = None


@dataclass
class BulkStats:
    """What writing cost: requests sent, what was sent again and why, and the time spent waiting."""

    requests: int = 0
    retried_requests: int = 0  # whole requests sent again (no answer, 429, 5xx)
    retried_actions: int = 0  # single actions sent again (answered 429 / 5xx inside a request)
    throttled: int = 0  # 429 answers, for a request or for an action
    wait_seconds: float = 0.0  # slept before retries
    smallest_chunk: int = 0  # fewest actions per request that throttling came down to

    @property
    def retries(self) -> int:
        return self.retried_requests + self.retried_actions


def _orjson_dumps() -> Callable[[Any], bytes] | None:
    try:
        import orjson
    except ImportError:
        return None
    fast = partial(orjson.dumps, option=orjson.OPT_SERIALIZE_NUMPY)

    def dumps(value: Any) -> bytes:
        try:
            return fast(value)
        except TypeError:  # what orjson refuses (a lone surrogate, an int over 64 bits): the stdlib's way
            return _stdlib_dumps(value)

    return dumps


def _stdlib_dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain).encode("utf-8", "surrogatepass")


def _plain(value: Any) -> Any:
    """A NumPy array or number as the JSON the stdlib can write (each float32 as its exact double)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# One document's JSON. orjson (the [fast] extra) writes a float32 vector straight from its array
# as the shortest text that reads back to the same float32: 4x faster than json.dumps of
# tolist() and 40% fewer bytes for the node to read (docs/opensearch.md, "Bulk loading against
# the node's own rate"); the stdlib fallback writes each float32 as its exact double, which reads
# back to the same float32.
dumps: Callable[[Any], bytes] = _orjson_dumps() or _stdlib_dumps


def write_bulk(transport: Transport, index: str, actions: Iterable[BulkAction], *, chunk_size: int = 256,
               max_bytes: int = MAX_BULK_BYTES, retry: RetryPolicy = RetryPolicy(),
               timeout: float | None = None, stats: BulkStats | None = None, in_flight: int = 1) -> Iterator[BulkOutcome]:
    """Send ``actions`` to ``index`` and yield each one's outcome (see the module docstring).
    ``stats``, when given, is filled in as the writing goes. ``in_flight`` requests are sent at
    once (each by a thread of its own); their answers are handled in the order they were sent,
    so retries and throttling work as with one."""
    if chunk_size < 1:
        raise ConfigError(f"chunk_size={chunk_size}: must be >= 1")
    if in_flight < 1:
        raise ConfigError(f"in_flight={in_flight}: must be >= 1")
    stats = stats if stats is not None else BulkStats()
    stats.smallest_chunk = chunk_size
    source = iter(actions)
    source_done = False
    tie_break = itertools.count()
    resend: deque[tuple[BulkAction, bytes]] = deque()  # a failed request's actions, sent again first
    later: list[tuple[float, int, BulkAction, bytes]] = []  # heap of (due time, tie-break, ...) for rejected actions
    failed_requests = acknowledged = 0
    size_now = chunk_size
    Chunk = list[tuple[BulkAction, bytes]]
    pending: deque[tuple[Chunk, Future]] = deque()  # requests sent, oldest first
    pool = ThreadPoolExecutor(in_flight, thread_name_prefix="hybrid-qpr-bulk") if in_flight > 1 else None

    def shrink() -> None:
        nonlocal size_now
        size_now = max(min(MIN_CHUNK, chunk_size), size_now // 2)
        stats.smallest_chunk = min(stats.smallest_chunk, size_now)

    def next_chunk() -> Chunk:
        nonlocal source_done
        chunk: Chunk = []
        size = 0
        now = time.monotonic()
        while len(chunk) < size_now and size < max_bytes:
            if resend:
                item = resend.popleft()
            elif later and later[0][0] <= now:
                item = heapq.heappop(later)[2:]
            elif not source_done:
                action = next(source, None)
                if action is None:
                    source_done = True
                    break
                item = (action, action.ndjson(index))
            else:
                break
            chunk.append(item)
            size += len(item[1])
        return chunk

    def send(chunk: Chunk) -> Any:
        return transport.request("POST", index_path(index, "_bulk"), b"".join(text for _, text in chunk),
                                 {"filter_path": BULK_FILTER}, ndjson=True, timeout=timeout)

    try:
        while True:
            while len(pending) < in_flight:
                chunk = next_chunk()
                if not chunk:
                    break
                stats.requests += 1
                pending.append((chunk, pool.submit(send, chunk) if pool else _call(send, chunk)))
            if not pending:
                if not later:
                    return
                pause = max(0.0, later[0][0] - time.monotonic())  # only rejected actions are left: wait for the first
                stats.wait_seconds += pause
                time.sleep(pause)
                continue
            chunk, answer = pending.popleft()
            try:
                response = answer.result()
            except HttpFailure as failure:
                if not failure.retryable:
                    raise error_for(failure, f"bulk request to {index!r}", transport.engine, index) from failure
                failed_requests += 1
                if failed_requests > retry.max_retries:
                    raise ClusterError(
                        f"writing to {index!r} stopped: {transport.name} unreachable or failing after "
                        f"{retry.max_retries} retries ({failure.status or failure.detail}). {acknowledged} operations "
                        f"were acknowledged before that. Ids are stable: re-run the same ingest once the cluster is "
                        f"back to resume without duplicates") from failure
                if failure.status == 429:
                    stats.throttled += 1
                    shrink()
                delay = retry.delay(failed_requests, failure.retry_after)
                # 429s are counted in the report; a node that does not answer is worth a line at once
                logger.log(logging.INFO if failure.status == 429 else logging.WARNING,
                           "bulk request to %s failed (%s); retry %d/%d in %.1f s", index,
                           failure.status or failure.detail, failed_requests, retry.max_retries, delay)
                stats.retried_requests += 1
                stats.wait_seconds += delay
                resend.extendleft(reversed(chunk))
                time.sleep(delay)
                continue
            failed_requests = 0
            throttled = 0
            items = response.get("items") if isinstance(response, dict) else None
            if not isinstance(items, list) or len(items) != len(chunk) or not all(isinstance(i, dict) and i for i in items):
                raise ClusterError(f"bulk request to {index!r}: {transport.name} answered {len(chunk)} operations with "
                                   f"{len(items) if isinstance(items, list) else 'no'} results ({str(response)[:80]}), "
                                   f"so the server at the URL is not a working {transport.name} node. "
                                   f"{acknowledged} operations were acknowledged before that")
            for (action, text), item in zip(chunk, items):
                op = next(iter(item.values()))
                status = int(op.get("status") or 0)
                if 200 <= status < 300 or (action.op == "delete" and status == 404):
                    acknowledged += 1
                    yield BulkOutcome(action, True, op.get("result"), status)
                elif status == 409 and action.version is not None and _error_type(op) == VERSION_CONFLICT:
                    acknowledged += 1
                    yield BulkOutcome(action, True, "superseded", status)
                elif (status == 429 or status >= 500) and action.attempts < retry.max_retries:
                    throttled += status == 429
                    stats.throttled += status == 429
                    action.attempts += 1
                    stats.retried_actions += 1
                    heapq.heappush(later, (time.monotonic() + retry.delay(action.attempts), next(tie_break), action,
                                           text))
                else:
                    yield BulkOutcome(action, False, None, status,
                                      reason({"error": op.get("error")}) or f"status {status}")
            if throttled * 2 >= len(chunk):  # the cluster turned away half the request or more
                shrink()
            elif size_now < chunk_size:
                size_now = min(chunk_size, size_now * 2)
    finally:
        if pool:  # requests still out are waited for (each within its timeout): no thread outlives the writer
            pool.shutdown(wait=True, cancel_futures=True)


def _call(send: Callable[[Any], Any], chunk: Any) -> Future:
    """``send(chunk)`` done now, as a finished ``Future`` (one request in flight needs no thread)."""
    done: Future = Future()
    try:
        done.set_result(send(chunk))
    except HttpFailure as failure:
        done.set_exception(failure)
    return done


def _error_type(op: dict) -> str | None:
    error = op.get("error")
    return error.get("type") if isinstance(error, dict) else None
