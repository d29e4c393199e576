"""One ml-commons call (``ml_request``), sent through the cluster connection's retry layer
(``backends.cluster.connection.send_retrying``), and the cluster setting chunked uploads need."""

from __future__ import annotations

from typing import Any

from hybrid_qpr.backends.cluster.connection import HttpFailure, RetryPolicy, reason, send_retrying
from hybrid_qpr.errors import ClusterError

ML = "/_plugins/_ml"
LOCAL_UPLOAD_SETTING = "plugins.ml_commons.allow_registering_model_via_local_file"
# 429s are sent again after 0.5, 1, 2, 4 and 8 s: ml-commons answers "Memory Circuit Breaker is
# open" while the JVM heap is above ``plugins.ml_commons.jvm_heap_memory_threshold`` (85 %), which
# on a 1 GB node happens for a moment after bulk work until the garbage collector runs
ML_RETRY = RetryPolicy(max_retries=5, initial_backoff=0.5, max_backoff=8.0)


def ml_request(client, method: str, path: str, body: Any = None, *, retry: RetryPolicy = ML_RETRY,
               retry_statuses: tuple[int, ...] = (429,), **params) -> dict[str, Any]:
    """One ml-commons call on an ``opensearchpy`` client, sent again while it is answered with
    one of ``retry_statuses`` (as ``retry`` says); any other failure, or the last, is a
    ``ClusterError`` naming the call, the status and the engine's reason."""
    from hybrid_qpr.backends.opensearch import OpenSearchTransport

    transport = OpenSearchTransport(client)
    what = f"{method} {path}"
    try:
        return send_retrying(lambda: transport.request(method, path, body, params or None), retry, what=what,
                             worth_retrying=lambda failure: failure.status in retry_statuses)
    except HttpFailure as failure:
        status = "no answer" if failure.status is None else failure.status
        raise ClusterError(f"{what} failed: {status} {reason(failure.body) or failure.detail}") from failure


def allow_local_upload_setting(client) -> None:
    """Set ``plugins.ml_commons.allow_registering_model_via_local_file: true`` (persistent).

    ml-commons 2.19 refuses chunked uploads without it ("To upload custom model from local
    file, user needs to enable allow_registering_model_via_local_file settings")."""
    ml_request(client, "PUT", "/_cluster/settings", {"persistent": {LOCAL_UPLOAD_SETTING: True}})
