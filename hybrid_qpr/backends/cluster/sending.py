"""How ``ClusterBackend`` sends its requests: one request with its failure translated, and the
reads that are sent again while a node is lost under them (failed shards, a dropped
connection, a 5xx naming an unreachable shard copy). The writes' retries are ``cluster.bulk``'s."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hybrid_qpr.backends.cluster.bodies import SEARCH_FILTER
from hybrid_qpr.backends.cluster.connection import ENGINE_NAMES, Engine, HttpFailure, Transport, error_for, translate
from hybrid_qpr.backends.cluster.names import index_path
from hybrid_qpr.errors import ClusterError

logger = logging.getLogger(__name__)

# a search answered with failed shards, or failed as a lost node fails it (no answer, a 5xx of
# the search phase), is sent again this many times, after 0.25, 0.5, 1 and 2 s: by then the
# cluster has dropped the node and the next try reaches the surviving copies
PARTIAL_RETRIES = 4
RETRY_WAIT_SECONDS = 0.25
# 500 answers whose type says a shard copy was unreachable, not that the request was wrong
NODE_LOSS_ERRORS = frozenset({"search_phase_execution_exception", "node_disconnected_exception",
                              "node_not_connected_exception", "no_shard_available_action_exception",
                              "connect_transport_exception"})


class RequestSending:
    """The requests of ``ClusterBackend`` to its index (``self.index``, through ``self.transport``)."""

    index: str
    engine: Engine
    transport: Transport
    request_timeout: float | None

    def path(self, *parts: str) -> str:
        """``/<index>/<parts...>`` with the index name percent-encoded (``names.index_path``)."""
        return index_path(self.index, *parts)

    @property
    def engine_name(self) -> str:
        return ENGINE_NAMES[self.engine]

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None, *, what: str,
                ndjson: bool = False) -> Any:
        with translate(f"{what} in {self.index!r}", self.engine, self.index):
            return self.transport.request(method, path, body, params, ndjson=ndjson, timeout=self.request_timeout)

    def _search(self, body: dict, what: str, params: dict | None = None) -> list[dict]:
        params = {"filter_path": SEARCH_FILTER, **(params or {})}
        response = self._whole_answer(what, lambda: self._send("POST", self.path("_search"), body, params))
        return response.get("hits", {}).get("hits", [])  # filter_path drops an empty hits list

    def _send(self, method: str, path: str, body: Any = None, params: dict | None = None, *,
              ndjson: bool = False) -> Any:
        """One request, its failure left as ``HttpFailure`` (``_whole_answer`` decides on it)."""
        return self.transport.request(method, path, body, params, ndjson=ndjson, timeout=self.request_timeout)

    def _whole_answer(self, what: str, send: Callable[[], Any],
                      failed_shards: Callable[[Any], int] | None = None) -> Any:
        """``send()``'s answer, sent again while it reports failed shards (such an answer misses
        those shards' documents) or fails as a node lost under it fails a read (``_node_loss``).
        A read is safe to repeat; after ``PARTIAL_RETRIES`` more tries it is a ``ClusterError``."""
        for attempt in range(PARTIAL_RETRIES + 1):
            last = attempt == PARTIAL_RETRIES
            try:
                response = send()
            except HttpFailure as failure:
                if last or not _node_loss(failure):
                    raise error_for(failure, f"{what} in {self.index!r}", self.engine, self.index) from failure
                logger.warning("%s in %r: %s (a node lost?); searching again", what, self.index, failure)
            else:
                failed = (failed_shards or _failed_shards)(response)
                if not failed:
                    return response
                if last:
                    raise ClusterError(f"{what} in {self.index!r}: {failed} shard(s) failed on each of "
                                       f"{PARTIAL_RETRIES + 1} tries, so the answer would miss their documents. "
                                       "Check the cluster health (a node down and a shard without a replica?)")
                logger.warning("%s in %r: %d shard(s) failed (a node lost?); searching again", what, self.index,
                               failed)
            time.sleep(RETRY_WAIT_SECONDS * 2 ** attempt)
        raise AssertionError("unreachable: the last try returns or raises")

    def _msearch(self, bodies: Sequence[dict], whats: Sequence[str],
                 headers: Sequence[Mapping[str, str]] | None = None) -> list[list[dict]]:
        """Several searches of this index in one round trip (``headers``: per-search options
        such as ``search_type``); a failed one raises like a search would."""
        lines = [json.dumps({"index": self.index, **(extra or {})}) for extra in (headers or [{}] * len(bodies))]
        payload = "".join(f"{header}\n{json.dumps(body)}\n" for header, body in zip(lines, bodies))
        params = {"filter_path": ",".join(f"responses.{path}" for path in SEARCH_FILTER.split(","))
                  + ",responses.error,responses.status"}

        def send() -> list[dict]:
            answers = self._send("POST", "/_msearch", payload, params, ndjson=True)["responses"]
            for answer in answers:  # an item failed by a lost node is retried as a failed request would be
                failure = _item_failure(answer)
                if failure is not None and _node_loss(failure):
                    raise failure
            return answers

        responses = self._whole_answer(" + ".join(whats), send, lambda answers: sum(map(_failed_shards, answers)))
        out = []
        for what, response in zip(whats, responses):
            failure = _item_failure(response)  # _msearch reports a failed search in its item, not as an HTTP error
            if failure is not None:
                raise error_for(failure, f"{what} in {self.index!r}", self.engine, self.index)
            out.append(response.get("hits", {}).get("hits", []))
        return out


def _node_loss(failure: HttpFailure) -> bool:
    """A read failed as it fails while a node leaves: the connection dropped (not a timeout,
    which a second try would only repeat), a gateway or unavailable answer, or a 500 whose type
    names an unreachable shard copy. A wrong request (4xx) or any other 500 is not retried."""
    if failure.cause:
        return False
    if failure.status is None or failure.status in (502, 503, 504):
        return True
    return failure.status == 500 and failure.error_type in NODE_LOSS_ERRORS


def _item_failure(answer: Mapping[str, Any]) -> HttpFailure | None:
    """An ``_msearch`` item's error as the failure of a request of its own, or None."""
    if "error" not in answer:
        return None
    return HttpFailure(int(answer.get("status") or 500), {"error": answer["error"]})


def _failed_shards(response: Mapping[str, Any]) -> int:
    return int((response.get("_shards") or {}).get("failed") or 0)
