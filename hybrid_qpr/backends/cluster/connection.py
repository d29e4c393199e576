"""Connection options and HTTP error translation shared by the OpenSearch and Elasticsearch backends.

Both engines speak the same REST dialect for everything hybrid-qpr sends (``_search``,
``_msearch``, ``_bulk``, ``_mget``, ``_count``, ``_mapping``), so the backends talk through a
``Transport``: one method, ``request(method, path, body, params)``, implemented per client
library (opensearch-py, elasticsearch-py). Each implementation turns its library's
exceptions into one ``HttpFailure`` carrying the HTTP status (``None`` = no answer) and the
JSON error body; ``translate`` then maps statuses and the error body's ``type`` to
hybrid-qpr errors - never by matching message strings.

Retries: the client libraries' own retry loops are switched off (``max_retries=0``) so that
one layer retries: ``RetryPolicy`` (capped exponential backoff, or the answer's ``Retry-After``),
which the bulk writer (``cluster.bulk``) applies to its requests and ``send_retrying`` to any
other one (ml-commons' calls, ``hybrid_qpr.mlcommons``).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from types import ModuleType
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

from hybrid_qpr.errors import BackendError, ClusterError, ConfigError
from hybrid_qpr.localnode.distributions import ENGINES, Engine  # noqa: F401  (the one list of engines)

logger = logging.getLogger(__name__)

class EngineSpec(NamedTuple):
    """What the CLI and the error messages need of one cluster engine: its name as users read
    it and where its backend lives (a module with ``connect`` and the ``Backend`` class)."""

    name: str
    module: str
    backend_class: str


# The cluster engines (ENGINES, kept once with the node builder; the first is the local node's
# default engine): the CLI's URL flags, client and backend choice, and the error messages read them.
ENGINE_SPECS: dict[str, EngineSpec] = {
    "opensearch": EngineSpec("OpenSearch", "hybrid_qpr.backends.opensearch", "OpenSearchBackend"),
    "elasticsearch": EngineSpec("Elasticsearch", "hybrid_qpr.backends.elasticsearch", "ElasticsearchBackend"),
}
ENGINE_NAMES = {engine: spec.name for engine, spec in ENGINE_SPECS.items()}


def engine_flag(engine: str) -> str:
    """The CLI flag that chooses ``engine`` (``--opensearch``)."""
    return f"--{engine}"


def node_command(engine: str, verb: str) -> str:
    """``'hybrid-qpr node start'`` for the default engine, ``... --engine elasticsearch'`` else."""
    return f"'hybrid-qpr node {verb}" + ("" if engine == ENGINES[0] else f" --engine {engine}") + "'"


def engine_module(engine: str) -> ModuleType:
    """The backend module of ``engine`` (imported on first use: each needs its client library)."""
    return importlib.import_module(ENGINE_SPECS[engine].module)
TOO_MANY_CLAUSES = {"too_many_clauses", "too_many_nested_clauses"}  # Lucene's maxClauseCount, as each engine names it
PROBE_PATH = "/_cluster/health"  # the Maven Central Elasticsearch has no rest-root: GET / answers 405


# ---------------------------------------------------------------------- options
@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how to connect. ``str`` hides the password and API key."""

    engine: Engine
    url: str
    username: str | None = None
    password: str | None = None
    api_key: str | None = None
    ca_certs: str | None = None
    verify_certs: bool = True
    timeout: float = 30.0

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    def __repr__(self) -> str:
        return (f"ConnectionOptions(engine={self.engine!r}, url={redact(self.url)!r}, username={self.username!r}, "
                f"password={'***' if self.password else None}, api_key={'***' if self.api_key else None}, "
                f"ca_certs={self.ca_certs!r}, verify_certs={self.verify_certs}, timeout={self.timeout})")

    __str__ = __repr__


def env_name(engine: str, suffix: str) -> str:
    """``HYBRID_QPR_OPENSEARCH_URL``, ``HYBRID_QPR_ELASTICSEARCH_API_KEY``, ..."""
    return f"HYBRID_QPR_{engine.upper()}_{suffix}"


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"${name}={value!r}: use true/false (or 1/0)")


def local_node_url(engine: Engine) -> str:
    """URL of the node 'hybrid-qpr node start [--engine elasticsearch]' runs."""
    from hybrid_qpr.localnode import LocalNode

    if engine == "elasticsearch":
        return LocalNode(engine="elasticsearch").status().url  # type: ignore[call-arg]
    return LocalNode().url


def resolve_options(engine: Engine, url: str | None = None, *, username: str | None = None,
                    password: str | None = None, api_key: str | None = None, ca_certs: str | None = None,
                    verify_certs: bool | None = None, timeout: float = 30.0) -> ConnectionOptions:
    """Fill every unset argument from ``$HYBRID_QPR_<ENGINE>_URL``, ``_USER``, ``_PASSWORD``,
    ``_API_KEY``, ``_CA`` and ``_VERIFY``; the URL falls back to the local node. Credentials
    may also sit in the URL (``https://user:pw@host:9200``)."""
    if engine not in ENGINES:
        raise ConfigError(f"engine={engine!r}: allowed values are {', '.join(ENGINES)}")
    name = ENGINE_NAMES[engine]
    url = url or os.environ.get(env_name(engine, "URL")) or local_node_url(engine)
    username = username if username is not None else os.environ.get(env_name(engine, "USER"))
    password = password if password is not None else os.environ.get(env_name(engine, "PASSWORD"))
    api_key = api_key if api_key is not None else os.environ.get(env_name(engine, "API_KEY"))
    ca_certs = ca_certs if ca_certs is not None else os.environ.get(env_name(engine, "CA"))
    if verify_certs is None:
        verify_certs = _env_flag(env_name(engine, "VERIFY"))
        verify_certs = True if verify_certs is None else verify_certs
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number in 0-65535)
    except ValueError as exc:
        raise ConfigError(f"{name} URL {redact(url)!r} cannot be read ({exc}): expected http(s)://host[:port], "
                          "e.g. http://127.0.0.1:9200 (an IPv6 host in brackets: http://[::1]:9200)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} URL {redact(url)!r}: expected http(s)://host[:port]")
    if parts.username and username is None:  # credentials given inside the URL
        username, password = parts.username, parts.password or ""
        url = redact(url)
    if (username is None) != (password is None):
        raise ConfigError(f"{name} basic auth needs both a user and a password (--user/--password or "
                          f"${env_name(engine, 'USER')}/_PASSWORD)")
    if api_key and username is not None:
        raise ConfigError(f"{name}: give either --api-key or --user/--password, not both")
    if timeout <= 0:
        raise ConfigError(f"timeout={timeout}: must be > 0 seconds")
    if parts.scheme == "http" and (username is not None or api_key):
        logger.warning("%s at %s: %s sent over plain http, readable by anyone on the network path. Fix: use an "
                       "https:// URL (TLS) for a node that needs credentials", name, redact(url),
                       "the API key is" if api_key else "the password is")
    return ConnectionOptions(engine, url, username, password, api_key or None, ca_certs or None,
                             bool(verify_certs), float(timeout))


def redact(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages and logs (also for a URL that
    cannot be parsed: then everything up to the last ``@`` is cut)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url.rpartition("@")[2]
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


# ---------------------------------------------------------------------- transport and errors
class HttpFailure(Exception):
    """A request that got no answer (``status is None``) or a non-2xx answer; ``headers`` are
    the answer's (lower-case names), when the client library gives them."""

    def __init__(self, status: int | None, body: Any, detail: str = "", headers: Mapping[str, str] | None = None,
                 cause: Literal["", "tls", "timeout", "foreign"] = ""):
        self.status = status
        self.body = body
        self.detail = detail
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        # what went wrong when it was not an engine's error answer: a TLS handshake, a timeout,
        # or an answer that is not the engine's (another kind of server at the URL)
        self.cause = cause
        super().__init__(f"{status}: {reason(body) or detail}")

    @property
    def foreign(self) -> bool:
        """The answer is not a search engine's: the client could not read it as one, or a
        non-5xx error came as HTML or text (a web server or proxy at the URL, not the node)."""
        if self.cause == "foreign":
            return True
        content_type = self.headers.get("content-type", "")
        # 401/403 come from a security layer, whose body need not be JSON: OpenSearch's security
        # plugin answers a refused login with text/plain "Unauthorized"
        return self.status is not None and self.status not in (401, 403, 429) and self.status < 500 \
            and bool(content_type) and "json" not in content_type

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait (``Retry-After``: delay-seconds or an HTTP date), or None."""
        return parse_retry_after(self.headers.get("retry-after"))

    @property
    def error_type(self) -> str | None:
        """The error body's ``type`` (e.g. ``index_not_found_exception``), or None."""
        return error_type(self.body)

    @property
    def retryable(self) -> bool:
        """No answer, too many requests, or a server-side failure: worth sending again (not a
        failed TLS handshake or another kind of server: those stay as they are)."""
        if self.cause in ("tls", "foreign"):
            return False
        return self.status is None or self.status == 429 or self.status >= 500


class Transport:
    """One engine's client behind the request shape both engines share."""

    engine: Engine = "opensearch"

    def __init__(self, client: Any):
        self.client = client

    @property
    def name(self) -> str:
        return ENGINE_NAMES[self.engine]

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None, *,
                ndjson: bool = False, timeout: float | None = None) -> Any:
        """Send one request and return the decoded JSON answer; failures raise ``HttpFailure``.
        ``ndjson=True`` sends ``body`` (a ``str``) as newline-delimited JSON (``_bulk``, ``_msearch``)."""
        raise NotImplementedError

    def other_engine(self) -> str | None:
        """The other search engine, when that is what answered this transport's last request
        (e.g. ``"Elasticsearch"`` behind an OpenSearch client); None when it was this engine or
        something unknown."""
        return None

    def exists(self, path: str) -> bool:
        """``HEAD path``: True on 2xx, False on 404."""
        try:
            self.request("HEAD", path)
            return True
        except HttpFailure as failure:
            if failure.status == 404:
                return False
            raise


@dataclass(frozen=True)
class RetryPolicy:
    """Wait ``min(max_backoff, initial_backoff * 2**(attempt - 1))`` seconds before try
    ``attempt + 1``; a ``Retry-After`` answer header replaces that wait, up to ``max_retry_after``."""

    # 0.5 s doubling: a busy node gets room at once, and six tries still wait 31.5 s in all for one
    # that is down or restarting before giving up
    max_retries: int = 6
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        if min(self.max_retries, self.initial_backoff, self.max_backoff, self.max_retry_after) < 0:
            raise ConfigError(f"retry policy {self}: retries and backoffs must be >= 0")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_retry_after)
        return min(self.max_backoff, self.initial_backoff * 2 ** max(0, attempt - 1))


Answer = TypeVar("Answer")


def send_retrying(send: Callable[[], Answer], retry: RetryPolicy, *, what: str,
                  worth_retrying: Callable[[HttpFailure], bool] = lambda failure: failure.retryable) -> Answer:
    """``send()``'s answer; a failure that is ``worth_retrying`` (default: ``HttpFailure.retryable``)
    is sent again after ``retry.delay``, at most ``retry.max_retries`` times, and the last one
    raised as it is. For a request that is safe to send twice."""
    attempt = 0
    while True:
        try:
            return send()
        except HttpFailure as failure:
            attempt += 1
            if attempt > retry.max_retries or not worth_retrying(failure):
                raise
            delay = retry.delay(attempt, failure.retry_after)
            logger.info("%s: %s; retry %d/%d in %.1f s", what, failure.status or failure.detail, attempt,
                        retry.max_retries, delay)
            time.sleep(delay)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` (RFC 9110 section 10.2.3) as seconds from now: ``"3"`` -> 3.0, an HTTP
    date -> the seconds until it (0 if past); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime  # here: every CLI command imports this module

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def error_type(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            root = (error.get("root_cause") or [error])[0]
            return root.get("type") or error.get("type")
    return None


def error_types(body: Any) -> set[str]:
    """Every ``type`` anywhere in an error body (root causes, shard failures, ``caused_by`` chains)."""
    found: set[str] = set()
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                found.add(node["type"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def reason(body: Any) -> str:
    """``type: reason`` of an engine's error body (or the body itself when it is not JSON)."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            root = (error.get("root_cause") or [error])[0]
            return f"{root.get('type')}: {root.get('reason')}"
        if error:
            return str(error)
        if "status" in body and "message" in body:
            return str(body["message"])
    return "" if body is None else str(body)[:300]


def missing_index(what: str, index: str, engine: str) -> BackendError:
    return BackendError(f"{what}: index {index!r} does not exist; create it with "
                        f"'hybrid-qpr ingest FILE --{engine} [URL] --index {index}'")


def error_for(failure: HttpFailure, what: str, engine: Engine, index: str | None = None) -> BackendError | ConfigError:
    """The hybrid-qpr error for ``failure``, chosen by HTTP status and error type."""
    name = ENGINE_NAMES[engine]
    status = failure.status
    flag = engine_flag(engine)
    if failure.cause == "tls":
        return ClusterError(f"{what}: the TLS handshake with {name} failed ({failure.detail}). If the node serves plain "
                            f"HTTP, use an http:// URL; if it uses TLS with its own CA, give --ca-certs CA.pem")
    if failure.foreign:
        content_type = failure.headers.get("content-type")
        answer = (f"answered {status} with {content_type}" if content_type
                  else f"answered with something else ({' '.join(failure.detail.split())[:120]})")
        return ClusterError(f"{what}: the server is not {name}: it {answer}. "
                            f"Fix: point {flag} at the node's HTTP address (the local node's is shown by "
                            f"{node_command(engine, 'status')})")
    if status is None and failure.cause == "timeout":
        return ClusterError(f"{what}: {name} did not answer in time ({failure.detail}). The node may be overloaded; "
                            "raise --timeout or retry later")
    if status is None:
        return ClusterError(f"{what}: cannot reach {name} ({failure.detail}). Is the node running? Start one with "
                            f"{node_command(engine, 'start')}")
    if status == 401:
        return ClusterError(f"{what}: {name} refused the credentials (401: wrong or missing user/password or API key); "
                            f"check --user/--password or --api-key (or ${env_name(engine, 'USER')}, _PASSWORD, _API_KEY)")
    if status == 403:
        return ClusterError(f"{what}: permission denied (403): the user is known but its roles do not allow this "
                            f"({reason(failure.body)}); use a user or API key with that privilege")
    if status == 404 and index is not None and failure.error_type == "index_not_found_exception":
        return missing_index(what, index, engine)
    if status == 404:
        return BackendError(f"{what}: not found ({reason(failure.body)})")
    if status == 400 and TOO_MANY_CLAUSES & error_types(failure.body):
        return ConfigError(f"{what}: the query has more terms than {name} allows in one query ({reason(failure.body)}; "
                           "the cluster setting indices.query.bool.max_clause_count). Fix: shorten the query to the "
                           "question itself")
    if status == 429 or status >= 500:
        return ClusterError(f"{what}: {name} answered {status} ({reason(failure.body)}); the cluster is overloaded "
                            "or failing - retry later")
    return BackendError(f"{what}: {name} answered {status} ({reason(failure.body)})")


@contextmanager
def translate(what: str, engine: Engine, index: str | None = None) -> Iterator[None]:
    """Turn an ``HttpFailure`` raised inside the block into the matching hybrid-qpr error."""
    try:
        yield
    except HttpFailure as failure:
        raise error_for(failure, what, engine, index) from failure


def compress_by_default(url: str) -> bool:
    """HTTP compression of requests and responses: on for a remote cluster (it saves bytes on
    the wire), off for a node on loopback, where it only costs CPU on both ends (measured on
    the local node: docs/opensearch.md, "Latency levers")."""
    host = (urlsplit(url).hostname or "").lower()
    return not (host == "localhost" or host == "::1" or host.startswith("127."))
