"""Bulk writing for both cluster engines, with the one retry layer hybrid-qpr has.

``write_bulk`` sends ``BulkAction``s in ``_bulk`` requests of at most ``chunk_size`` actions
(and about ``max_bytes``) and yields one ``BulkOutcome`` per action, in the style of the
clients' ``streaming_bulk`` helpers (which are not used: each retries in its own way, and a
second retry layer under this one would multiply waits and hide connection loss).

What is retried, with the capped exponential backoff of ``RetryPolicy``:

* a whole request that got no answer (connection refused or reset, timeout) or was answered
  429 / 5xx - all its actions are sent again (writes carry explicit ``_id``s, so re-sending
  an action the engine had applied replaces the document, never duplicates it);
* a single action answered 429 / 5xx inside a successful request (a busy shard).

After ``max_retries`` consecutive failed requests a ``ClusterError`` says how many actions
were acknowledged and that re-running the same ingest resumes it. An action still rejected
after ``max_retries`` tries, or rejected for a reason retrying cannot fix (a mapping
conflict), becomes a failed outcome: reported, never silently dropped.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from hybrid_qpr.backends.cluster.connection import HttpFailure, Transport, error_for, reason
from hybrid_qpr.errors import ClusterError, ConfigError

logger = logging.getLogger(__name__)

BULK_FILTER = "errors,items.*._id,items.*.status,items.*.result,items.*.error"
MAX_BULK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """Wait ``min(max_backoff, initial_backoff * 2**(attempt - 1))`` seconds before try ``attempt + 1``."""

    max_retries: int = 5
    initial_backoff: float = 1.0
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.initial_backoff < 0 or self.max_backoff < 0:
            raise ConfigError(f"retry policy {self}: retries and backoffs must be >= 0")

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.initial_backoff * 2 ** max(0, attempt - 1))


@dataclass
class BulkAction:
    """One ``index`` (with ``source``) or ``delete`` of document ``id``; ``line`` is the input
    line it came from (for reports)."""

    op: Literal["index", "delete"]
    id: str
    source: dict[str, Any] | None = None
    line: int | None = None
    attempts: int = 0

    def ndjson(self, index: str) -> str:
        header = json.dumps({self.op: {"_index": index, "_id": self.id}}, ensure_ascii=False)
        if self.op == "delete":
            return header + "\n"
        return header + "\n" + json.dumps(self.source, ensure_ascii=False, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class BulkOutcome:
    """``ok`` with the engine's ``result`` (created, updated, deleted, not_found), or a failure."""

    action: BulkAction
    ok: bool
    result: str | None
    status: int
    error: str | None = None


def write_bulk(transport: Transport, index: str, actions: Iterable[BulkAction], *, chunk_size: int = 256,
               max_bytes: int = MAX_BULK_BYTES, retry: RetryPolicy = RetryPolicy(),
               timeout: float | None = None) -> Iterator[BulkOutcome]:
    """Send ``actions`` to ``index`` and yield each one's outcome (see the module docstring)."""
    if chunk_size < 1:
        raise ConfigError(f"chunk_size={chunk_size}: must be >= 1")
    source = iter(actions)
    pending: deque[tuple[BulkAction, str]] = deque()  # sent again before anything new
    failed_requests = acknowledged = 0
    while True:
        chunk: list[tuple[BulkAction, str]] = []
        size = 0
        while len(chunk) < chunk_size and size < max_bytes:
            if pending:
                item = pending.popleft()
            else:
                action = next(source, None)
                if action is None:
                    break
                item = (action, action.ndjson(index))
            chunk.append(item)
            size += len(item[1])
        if not chunk:
            return
        try:
            response = transport.request("POST", f"/{index}/_bulk", "".join(text for _, text in chunk),
                                         {"filter_path": BULK_FILTER}, ndjson=True, timeout=timeout)
        except HttpFailure as failure:
            if not failure.retryable:
                raise error_for(failure, f"bulk request to {index!r}", transport.engine, index) from failure
            failed_requests += 1
            if failed_requests > retry.max_retries:
                raise ClusterError(
                    f"writing to {index!r} stopped: {transport.name} unreachable or failing after {retry.max_retries} "
                    f"retries ({failure.status or failure.detail}). {acknowledged} operations were acknowledged "
                    f"before that. Ids are stable: re-run the same ingest once the cluster is back to resume without "
                    f"duplicates") from failure
            delay = retry.delay(failed_requests)
            logger.warning("bulk request to %s failed (%s); retry %d/%d in %.1f s", index,
                           failure.status or failure.detail, failed_requests, retry.max_retries, delay)
            pending.extendleft(reversed(chunk))
            time.sleep(delay)
            continue
        failed_requests = 0
        wait = 0.0
        for (action, text), item in zip(chunk, response.get("items", [])):
            op = next(iter(item.values()))
            status = int(op.get("status") or 0)
            if 200 <= status < 300 or (action.op == "delete" and status == 404):
                acknowledged += 1
                yield BulkOutcome(action, True, op.get("result"), status)
            elif (status == 429 or status >= 500) and action.attempts < retry.max_retries:
                action.attempts += 1
                pending.append((action, text))
                wait = max(wait, retry.delay(action.attempts))
            else:
                yield BulkOutcome(action, False, None, status, reason({"error": op.get("error")}) or f"status {status}")
        if wait:
            logger.info("%d actions answered 429/5xx; sending them again in %.1f s", len(pending), wait)
            time.sleep(wait)
