"""``ClusterBackend``: everything the OpenSearch and Elasticsearch backends do alike.

An index holds ``text`` (BM25), ``embedding`` (the encoder vector, HNSW), ``metadata``
(strings mapped as keywords, so filters are exact term matches) and, in the mapping
``_meta``, the model facts (``dim``, ``distance``, ``model_fingerprint``, ``model_kind``)
and the tuned ``fusion`` defaults. An engine module (``backends/opensearch.py``,
``backends/elasticsearch.py``) adds only what differs: the vector field's mapping and
kNN clause, the exact re-scoring of given ids, its client and its server-side modes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from hybrid_qpr.backends.base import Capabilities, IngestReport, document_problem
from hybrid_qpr.backends.cluster import writer
from hybrid_qpr.backends.cluster.bodies import (DEFAULT_SHARDS, LEGACY_OPENSEARCH_ANALYZER, METADATA_FIELD,
                                                SEARCH_FILTER, TEXT_FIELD, TOKENS_ANALYZER, TOKENS_FIELD, VECTOR_FIELD,
                                                bm25_body, check_shards)
from hybrid_qpr.backends.cluster.connection import (ENGINE_NAMES, Engine, HttpFailure, Transport, error_for, reason,
                                                    translate)
from hybrid_qpr.backends.cluster.names import check_index_name, id_problem, index_path
from hybrid_qpr.distance import Distance, check_distance, prepare_vectors, score_from_opensearch
from hybrid_qpr.errors import BackendError, ClusterError, ConfigError, ModelMismatchError
from hybrid_qpr.text.analysis import Analyzer, get_analyzer, legacy_note, refuse_another
from hybrid_qpr.types import Candidates, Document, Filters, Hit, QueryVector

logger = logging.getLogger(__name__)

# HNSW candidate floor of a kNN search (OpenSearch ef_search, Elasticsearch num_candidates); an
# engine module sets its own measured default_knn_candidates (docs/opensearch.md, elasticsearch.md)
KNN_CANDIDATES = 100
MAX_KNN_K = 10_000  # both engines' limit on a kNN search's k and num_candidates
DEFAULT_RESULT_WINDOW = 10_000  # index.max_result_window unless the index sets another
# a search answered with failed shards, or failed as a lost node fails it (no answer, a 5xx of
# the search phase), is sent again this many times, after 0.25, 0.5, 1 and 2 s: by then the
# cluster has dropped the node and the next try reaches the surviving copies
PARTIAL_RETRIES = 4
RETRY_WAIT_SECONDS = 0.25
# 500 answers whose type says a shard copy was unreachable, not that the request was wrong
NODE_LOSS_ERRORS = frozenset({"search_phase_execution_exception", "node_disconnected_exception",
                              "node_not_connected_exception", "no_shard_available_action_exception",
                              "connect_transport_exception"})
# seconds index creation waits for its shards to start (the engines' default is also 30), and
# how much longer the client waits for the answer
CREATE_WAIT_SECONDS = 30
CREATE_ANSWER_MARGIN = 30
SearchType = Literal["auto", "query_then_fetch", "dfs_query_then_fetch"]
SEARCH_TYPES: tuple[str, ...] = get_args(SearchType)


class ClusterBackend:
    """``hybrid_qpr.backends.base.Backend`` over one index of a search cluster (see the module docstring).

    Reads the model facts from the index's mapping ``_meta``; ``ingest`` creates the index
    when it is missing and refuses a model that does not match it.

    ``documents_in_hits`` (default True): searches return each hit's text and metadata with
    it (``Hit.document``), so a query is one request instead of a search plus an ``_mget``
    (measured in docs/opensearch.md, "Latency levers"). False returns bare hits.
    ``knn_candidates``: the HNSW candidate floor of a kNN search (default: the engine's
    ``default_knn_candidates``).
    ``search_type`` of the searches that score BM25: ``dfs_query_then_fetch`` first gathers
    term statistics from every shard, so a document's BM25 score does not depend on which
    shard holds it; ``query_then_fetch`` scores with each shard's own statistics (one round
    trip fewer). ``auto`` (default): dfs when the index has more than one primary shard, which
    is what the measurement in docs/opensearch.md ("Several nodes") chose.
    """

    engine: Engine
    capabilities = Capabilities(batched_bm25_and_knn=True)
    default_knn_candidates = KNN_CANDIDATES
    vector_type: str  # the mapping type of the vector field
    # what multiplies the engine's BM25 scores into the embedded index's (Elasticsearch's differ by a factor)
    bm25_score_scale: float = 1.0

    def __init__(self, client: Any, index: str, *, request_timeout: float | None = None,
                 documents_in_hits: bool = True, knn_candidates: int | None = None, search_type: SearchType = "auto"):
        check_index_name(index, self.engine_name)
        self.client = client
        self.transport = self.transport_class(client)
        self.index = index
        self.request_timeout = request_timeout
        self.documents_in_hits = documents_in_hits
        self.knn_candidates = self.default_knn_candidates if knn_candidates is None else int(knn_candidates)
        if self.knn_candidates < 1:
            raise ConfigError(f"knn_candidates={knn_candidates!r}: must be >= 1")
        if search_type not in SEARCH_TYPES:
            raise ConfigError(f"search_type={search_type!r}: allowed values are {', '.join(SEARCH_TYPES)}")
        self.search_type = search_type
        self._settings: dict[str, str] | None = None
        self._meta: dict[str, Any] | None = None

    # ---- what an engine module provides
    transport_class: type[Transport]

    @staticmethod
    def index_body(dim: int, distance: str, fingerprint: str, kind: str, *, shards: int = DEFAULT_SHARDS,
                   replicas: int = 0) -> dict:
        """The create-index body (the engine module's ``index_body``)."""
        raise NotImplementedError

    def knn_body(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        raise NotImplementedError

    def vector_field_problems(self, field: Mapping[str, Any], encoder) -> list[str]:
        """What is wrong with a vector field of the right type for ``encoder`` (dims, similarity)."""
        raise NotImplementedError

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        raise NotImplementedError

    def path(self, *parts: str) -> str:
        """``/<index>/<parts...>`` with the index name percent-encoded (``names.index_path``)."""
        return index_path(self.index, *parts)

    @property
    def engine_name(self) -> str:
        return ENGINE_NAMES[self.engine]

    # ---- requests
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

    def bm25_search_type(self) -> str:
        """The ``search_type`` of a search that scores BM25 (see the class docstring)."""
        if self.search_type != "auto":
            return self.search_type
        return "dfs_query_then_fetch" if self.shards > 1 else "query_then_fetch"

    def _index_settings(self) -> dict[str, str]:
        """The index settings the query path needs (primary shards, result window), flat, the
        index's own over the engine's defaults; read once. Empty while the index does not exist:
        the search itself then reports the missing index."""
        if self._settings is None:
            with translate(f"reading the settings of {self.index!r}", self.engine, self.index):
                try:
                    answer = self.transport.request("GET", self.path("_settings"), None, {
                        "include_defaults": "true", "filter_path": ",".join(
                            f"*.{part}.index.{name}" for part in ("settings", "defaults")
                            for name in ("number_of_shards", "max_result_window"))}, timeout=self.request_timeout)
                except HttpFailure as failure:
                    if failure.status == 404:
                        return {}
                    raise
            settings: dict[str, str] = {}  # flattened here: filter_path cannot match flat_settings' dotted keys
            for value in answer.values():
                for part in ("defaults", "settings"):
                    settings.update({f"index.{k}": v for k, v in value.get(part, {}).get("index", {}).items()})
            self._settings = settings
        return self._settings

    @property
    def shards(self) -> int:
        """The index's number of primary shards (1 while the index does not exist)."""
        return int(self._index_settings().get("index.number_of_shards", 1))

    def _bm25_params(self) -> dict[str, str]:
        return {"search_type": self.bm25_search_type()}

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

    def refresh_index(self) -> None:
        """Make what was written searchable (the engine's ``_refresh``)."""
        self.request("POST", self.path("_refresh"), what="refreshing")

    # ---- index facts
    def exists(self) -> bool:
        with translate(f"checking index {self.index!r}", self.engine):
            return self.transport.exists(self.path())

    @property
    def meta(self) -> dict[str, Any]:
        """The index mapping's ``_meta`` plus ``_properties`` (cached; ``refresh_meta`` re-reads it)."""
        if self._meta is None:
            self.refresh_meta()
        return self._meta  # type: ignore[return-value]

    def refresh_meta(self) -> dict[str, Any]:
        mapping = self.request("GET", self.path("_mapping"), what="reading the mapping")
        # one entry, keyed by the concrete index (an alias's answer names the index behind it)
        entry = next(iter(mapping.values()), None) if isinstance(mapping, dict) else None
        mappings = entry.get("mappings") if isinstance(entry, dict) else None
        if not isinstance(mappings, dict):
            raise BackendError(f"reading the mapping of {self.index!r}: the answer holds no mapping "
                               f"({str(mapping)[:80]}); is the server at the URL a {self.engine_name} node?")
        meta = dict(mappings.get("_meta") or {})
        meta["_properties"] = mappings.get("properties", {})
        self._meta = meta
        return meta

    @property
    def distance(self) -> Distance:
        distance = self.meta.get("distance")
        if distance is None:
            raise BackendError(f"index {self.index!r} was not created by hybrid-qpr: its mapping _meta has no "
                               f"'distance'; re-create it with 'hybrid-qpr ingest'")
        return check_distance(distance)

    @property
    def dim(self) -> int:
        return int(self.meta.get("dim") or 0)

    @property
    def model_fingerprint(self) -> str | None:
        return self.meta.get("model_fingerprint")

    @property
    def model_dir(self) -> str | None:
        """The model directory the index was built with (``_meta.model_dir``, recorded by
        ``ingest``), so queries can default to it; None for indexes made before it was recorded."""
        return self.meta.get("model_dir")

    @property
    def max_result_window(self) -> int:
        """``index.max_result_window``: the most hits one search may return (from + size)."""
        return int(self._index_settings().get("index.max_result_window", DEFAULT_RESULT_WINDOW))

    def check_depth(self, depth: int, *, knn: bool) -> None:
        """Refuse, before asking, a list longer than the engine returns: ``index.max_result_window``
        for any search, and ``MAX_KNN_K`` for a kNN one."""
        window = min(self.max_result_window, MAX_KNN_K) if knn else self.max_result_window
        if depth > window:
            limit = (f"kNN searches return at most {MAX_KNN_K:,} and index.max_result_window is "
                     f"{self.max_result_window:,}" if knn else f"index.max_result_window is {self.max_result_window:,}")
            raise ConfigError(f"{depth:,} hits asked per list (top_k + offset, or the fusion depth) but {self.engine_name} "
                              f"index {self.index!r} returns at most {window:,} ({limit}). Fix: ask for <= {window:,} "
                              f"(e.g. -k 10 with --offset to page)")

    @property
    def metadata_fields(self) -> dict[str, str]:
        """Metadata field (dotted path) -> its mapping type, from the index mapping."""
        fields: dict[str, str] = {}
        stack = [("", self.meta.get("_properties", {}).get(METADATA_FIELD, {}).get("properties", {}))]
        while stack:
            prefix, properties = stack.pop()
            for name, spec in properties.items():
                if "properties" in spec:
                    stack.append((f"{prefix}{name}.", spec["properties"]))
                else:
                    fields[f"{prefix}{name}"] = spec.get("type", "object")
        return fields

    def checked_filters(self, filters: Filters | None) -> Filters | None:
        """``filters`` checked against the mapping and given the field's type: an unknown field
        is refused with the known ones listed; a boolean field takes true/false (JSON or the
        strings "true"/"false"), a number field numbers; a keyword field compares the value as
        text (so ``true`` matches the string "true", never 1)."""
        if not filters:
            return filters
        fields = self.metadata_fields
        if any(str(f) not in fields for f in filters):
            self.refresh_meta()  # documents ingested since the mapping was read may have added fields
            fields = self.metadata_fields
        out: dict[str, Any] = {}
        for field, value in filters.items():
            kind = fields.get(str(field))
            if kind is None:
                listed = ", ".join(sorted(fields)) or "none (the documents have no metadata)"
                raise ConfigError(f"filter field {field!r} is not in any document of index {self.index!r}; "
                                  f"known fields: {listed}")
            values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
            typed = [_typed_filter_value(field, kind, v, self.index) for v in values]
            out[field] = typed if isinstance(value, (list, tuple, set, frozenset)) else typed[0]
        return out

    @property
    def bm25_field(self) -> str:
        """The field BM25 searches: ``bodies.TOKENS_FIELD``, the analyzer's terms written by the
        client; an OpenSearch index made before analyzers has none and searches ``text``."""
        return TOKENS_FIELD if TOKENS_FIELD in self.meta.get("_properties", {}) else TEXT_FIELD

    @property
    def bm25_analyzer(self) -> str:
        """The mapping analyzer of ``bm25_field`` that gives the client's terms back unchanged."""
        return TOKENS_ANALYZER if self.bm25_field == TOKENS_FIELD else LEGACY_OPENSEARCH_ANALYZER

    @property
    def analyzer(self) -> Analyzer:
        """BM25's analyzer, as the mapping ``_meta`` records it (none recorded: ``legacy``)."""
        bm25 = self.meta.get("bm25")
        return Analyzer.from_record(bm25.get("analyzer") if isinstance(bm25, Mapping) else None,
                                    f"{self.engine_name} index {self.index!r}")

    def analyzer_note(self) -> str | None:
        """A line for an index still on the legacy analyzer, with the way to move it (ingest anew)."""
        if not self.analyzer.legacy:
            return None
        return legacy_note(f"{self.engine_name} index {self.index!r}",
                           "ingest the same source into a new index (the analyzer is chosen when an index is "
                           "created), then point queries at it or drop this one with 'hybrid-qpr index drop'")

    def check_analyzer(self, wanted: Analyzer) -> None:
        """Refuse to add documents analysed one way to an index whose BM25 terms are another's."""
        refuse_another(self.analyzer, wanted, f"{self.engine_name} index {self.index!r}",
                       f"ingest into a new index to use {wanted.name}")

    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning (e.g. ``{"fusion": "minmax", "alpha": 0.3, "depth": 100}``), or ``{}``."""
        return dict(self.meta.get("fusion") or {})

    def set_fusion_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Store tuned fusion defaults in the mapping ``_meta`` (other ``_meta`` keys kept)."""
        meta = {k: v for k, v in self.meta.items() if not k.startswith("_")}
        meta["fusion"] = dict(defaults)
        self.request("PUT", self.path("_mapping"), {"_meta": meta}, what="updating the _meta")
        self._meta = None

    def check_encoder(self, encoder) -> None:
        """Refuse an encoder whose dims, distance or fingerprint differ from the index's."""
        problems = self.layout_problems(self.meta, encoder)
        if problems:
            built_with = f" (--model {self.model_dir})" if self.model_dir else ""
            raise ModelMismatchError(f"index {self.index!r} does not match model {encoder.model_dir}: "
                                     + "; ".join(problems) + f". Use the model the index was built with{built_with}, "
                                     "or ingest into a new index")
        analyzer = self.meta.get("_properties", {}).get(self.bm25_field, {}).get("analyzer")
        if analyzer != self.bm25_analyzer:
            logger.warning("index %s: field %r uses the %s analyzer, not %s (made by an older hybrid-qpr), so its BM25 "
                           "scores differ from the embedded index's; ingest into a new index to align them",
                           self.index, self.bm25_field, analyzer or "default", self.bm25_analyzer)

    def layout_problems(self, meta: Mapping[str, Any], encoder) -> list[str]:
        """What differs between an index's mapping and what ``encoder`` needs (empty = fine)."""
        properties = meta.get("_properties", {})
        vector = properties.get(VECTOR_FIELD, {})
        if vector.get("type") != self.vector_type:
            problems = [f"field {VECTOR_FIELD!r} is {vector.get('type') or 'missing'}, expected {self.vector_type}"]
        else:
            problems = self.vector_field_problems(vector, encoder)
        for field in dict.fromkeys((TEXT_FIELD, self.bm25_field)):
            if properties.get(field, {}).get("type") != "text":
                problems.append(f"field {field!r} is {properties.get(field, {}).get('type') or 'missing'}, expected text "
                                "(an index made by an older hybrid-qpr: ingest into a new index)")
        if meta.get("distance") not in (None, encoder.distance):
            problems.append(f"index distance is {meta.get('distance')}, the model uses {encoder.distance}")
        if meta.get("model_fingerprint") not in (None, encoder.fingerprint):
            problems.append(f"index was built with model fingerprint {meta.get('model_fingerprint')}, "
                            f"this model is {encoder.fingerprint}")
        if "distance" not in meta:
            problems.append("mapping _meta lacks the hybrid-qpr model facts (not created by hybrid-qpr)")
        return problems

    def data_nodes(self) -> int:
        """How many data nodes the cluster has (from ``_cluster/health``)."""
        with translate("reading cluster health", self.engine):
            health = self.transport.request("GET", "/_cluster/health")
        return int(health.get("number_of_data_nodes") or 1)

    def ensure_index(self, encoder, *, shards: int | None = None, replicas: int | None = None,
                     analyzer: str | None = None) -> bool:
        """Create the index for ``encoder`` if missing (True), else check it matches (False).
        ``shards`` defaults to 1 and ``replicas`` to what the cluster can hold (0 on one data
        node, else 1); both only apply when the index is created. ``analyzer``: BM25's language
        analysis of a new index (default English); an existing one refuses another.

        More replicas than the cluster can place (a replica never shares a node with its
        primary) are refused before anything is created, naming the node count. The index is
        created whole or not at all: when its shards do not start within ``CREATE_WAIT_SECONDS``,
        or the request fails, an index this call created is deleted again."""
        if self.exists():
            self.check_encoder(encoder)
            if analyzer is not None:
                self.check_analyzer(get_analyzer(analyzer))
            return False
        # no replicas fit any cluster: then the health (a cluster privilege) is not asked
        nodes = self.data_nodes() if replicas != 0 else None
        shards, replicas = check_shards(DEFAULT_SHARDS if shards is None else shards,
                                        (0 if (nodes or 1) <= 1 else 1) if replicas is None else replicas)
        if nodes is not None and replicas >= nodes:
            raise ConfigError(f"creating index {self.index!r} with {replicas} replica(s) per shard: a replica is never "
                              f"placed on the node that holds its primary, so that needs {replicas + 1} data nodes and "
                              f"this {self.engine_name} cluster has {nodes}. Nothing was created; use --replicas "
                              f"{nodes - 1} (or add data nodes)")
        body = self.index_body(encoder.dim, encoder.distance, encoder.fingerprint, encoder.kind,
                               shards=shards, replicas=replicas, analyzer=analyzer)
        meta = body["mappings"]["_meta"]
        # remembered so that queries without --model use this model (never a secret: a local path)
        meta["model_dir"] = str(Path(encoder.model_dir).resolve())
        meta["creation_id"] = creation_id = uuid.uuid4().hex  # tells the index this call made from a rival's
        params = {"wait_for_active_shards": "all", "timeout": f"{CREATE_WAIT_SECONDS}s"}
        answer: Any = None
        try:
            with translate(f"creating index {self.index!r}", self.engine):
                try:
                    answer = self.transport.request("PUT", self.path(), body, params,
                                                    timeout=max(self.request_timeout or 0, CREATE_WAIT_SECONDS + CREATE_ANSWER_MARGIN))
                except HttpFailure as failure:
                    if failure.error_type != "resource_already_exists_exception":  # lost a race with another ingest
                        raise
        except BaseException as exc:
            failure = exc.__cause__
            if not (isinstance(failure, HttpFailure) and failure.status is not None and failure.status < 500):
                self._undo_create(creation_id)  # no answer (or a 5xx): the index may have been made all the same
            raise
        finally:
            self._forget_index()
        if isinstance(answer, dict) and answer.get("shards_acknowledged") is False:
            self._undo_create(creation_id)
            raise ClusterError(f"creating index {self.index!r}: its shards did not start within {CREATE_WAIT_SECONDS} s "
                               f"({shards} primaries, {replicas} replica(s) each), so it was "
                               "deleted again. GET /_cluster/allocation/explain says why a shard is not placed "
                               "(a disk over its watermark?)")
        self.check_encoder(encoder)
        logger.info("created index %s (dim %d, %s, %d shards, %d replicas)", self.index, encoder.dim,
                    encoder.distance, shards, replicas)
        return True

    def _undo_create(self, creation_id: str) -> None:
        """Delete the index if it is the one made with ``creation_id`` (never another
        process's); quick requests, and any failure only logged: the caller is already failing."""
        try:
            mapping = self.transport.request("GET", self.path("_mapping"), timeout=10)
            metas = [(entry.get("mappings") or {}).get("_meta") or {} for entry in mapping.values()]
            if any(meta.get("creation_id") == creation_id for meta in metas):
                self.transport.request("DELETE", self.path(), timeout=10)
                logger.info("deleted the half-made index %s", self.index)
        except HttpFailure as failure:
            if failure.status != 404:
                logger.warning("index %s may be left half-made (%s); delete it with 'hybrid-qpr index drop %s'",
                               self.index, failure, self.index)
        except Exception as exc:  # an odd answer: never hide the error being raised
            logger.warning("index %s may be left half-made (%s)", self.index, exc)

    def _forget_index(self) -> None:
        """Drop what was read of the index (mapping ``_meta``, settings): it is being created or deleted."""
        self._meta = None
        self._settings = None

    def drop(self) -> bool:
        """Delete the whole index; False if it did not exist."""
        self._forget_index()
        with translate(f"deleting index {self.index!r}", self.engine):
            try:
                self.transport.request("DELETE", self.path())
            except HttpFailure as failure:
                if failure.status == 404:
                    return False
                raise
        return True

    # ---- read side
    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """BM25 via a ``match`` query: the text is analysed, never parsed as query syntax."""
        self.check_depth(depth, knn=False)
        filters = self.checked_filters(filters)
        return self._bm25_hits(self._search(self._bm25_body(query, depth, filters), "BM25 search", self._bm25_params()))

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by HNSW; filters run inside the graph search (so ``depth`` hits still come back)."""
        self.check_depth(depth, knn=True)
        filters = self.checked_filters(filters)
        return self._to_hits(self._search(self.knn_body(vector, depth, filters), "kNN search"))

    def bm25_and_knn(self, query: str, vector: QueryVector, depth: int,
                     filters: Filters | None = None) -> Candidates:
        """``bm25`` and ``knn`` in one ``_msearch`` round trip (client-side hybrid's candidates)."""
        self.check_depth(depth, knn=True)
        filters = self.checked_filters(filters)
        bm25_hits, knn_hits = self._msearch([self._bm25_body(query, depth, filters),
                                             self.knn_body(vector.get(), depth, filters)],
                                            ["BM25 search", "kNN search"], [self._bm25_params(), {}])
        return Candidates.of_hits(self._bm25_hits(bm25_hits), self._to_hits(knn_hits))

    def _bm25_body(self, query: str, depth: int, filters: Filters | None) -> dict:
        return bm25_body(query, depth, filters, self.bm25_field, self.analyzer, self.documents_in_hits)

    def _bm25_hits(self, hits: list[dict]) -> list[Hit]:
        """BM25 hits on the embedded index's scale (``bm25_score_scale``)."""
        if self.bm25_score_scale == 1.0:
            return self._raw_hits(hits)
        return [Hit(h["_id"], float(h["_score"]) * self.bm25_score_scale, _stored_document(h)) for h in hits]

    def documents(self, ids: Sequence[str], places: Sequence[Any] | None = None) -> dict[str, Document]:
        """``_mget`` of ``ids`` (a cluster's lists carry no ``places``)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        response = self._whole_answer("fetching documents", lambda: self._send(
            "POST", self.path("_mget"), {"ids": ids}, {"_source_includes": f"{TEXT_FIELD},{METADATA_FIELD}"}))
        return {doc["_id"]: _stored_document(doc) for doc in response["docs"] if doc.get("found")}

    def count(self) -> int:
        response = self._whole_answer("counting documents", lambda: self._send("GET", self.path("_count")))
        return int(response["count"])

    def empty_reason(self) -> str:
        return (f"{self.engine_name} index {self.index!r} holds no documents. Fix: hybrid-qpr ingest FILE --index "
                f"{self.index} --{self.engine}")

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()

    # ---- write side (hybrid_qpr.backends.cluster.writer)
    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *,
               batch_size: int = writer.BULK_BATCH_SIZE,
               rejects_path: str | Path | None = None, show_progress: bool = True, wait: bool | float = False,
               max_retries: int = 6,
               initial_backoff: float = 0.5, max_backoff: float = 30.0, shards: int | None = None,
               replicas: int | None = None, bulk_timeout: float | None = None,
               in_flight: int = writer.BULK_IN_FLIGHT) -> IngestReport:
        """Encode and bulk-index ``documents`` (``Document`` or ``(line, Document)``) with ``_id`` =
        document id, so re-running replaces instead of duplicating.

        A document with a ``document_problem`` (as for every backend, plus an id over
        ``names.MAX_ID_BYTES``) is skipped before it is encoded and reported in ``skipped`` with
        its line (a plain ``Document``: its position in ``documents``, from 1); the others are
        written. ``wait`` is the contract's: a cluster has no write lock to wait for.

        Encoding (and writing each document's JSON) runs up to ``writer.READ_AHEAD_BATCHES`` batches ahead
        in a thread, so it goes on while a request is sent or a retry waits; that thread is stopped
        and joined on every way out. ``in_flight`` ``_bulk`` requests of ``batch_size`` documents are
        sent at once (default ``writer.BULK_IN_FLIGHT`` and ``BULK_BATCH_SIZE``, 4 and 1,000). An index the
        ingest creates is loaded with refresh off (replicas kept: a node lost mid-load must not take
        the only copy of a shard), its settings restored at the end, on failure too (``cluster.loading``).
        Writes are externally versioned and retried as ``cluster.bulk.write_bulk`` says (capped
        exponential backoff ``min(max_backoff, initial_backoff * 2**(attempt - 1))`` or the server's
        ``Retry-After``, at most ``max_retries`` times; smaller requests while the cluster answers
        429); a connection lost for longer raises ``ClusterError`` (re-run the same ingest to
        resume). ``bulk_timeout``: seconds one ``_bulk`` may take (default: the client's, >= 60).

        Success is decided by ids, not by the engine's created/updated answers (a try answered
        429 or timed out may have been applied): after a refresh, every id written is read back
        in batches and must hold the text this ingest wrote last for it. An id that does not is
        a failure. ``indexed`` is the number of documents the index gained, ``updated`` the other
        lines written. Failures are listed in the report and written as JSON lines to ``rejects_path``.
        ``shards``/``replicas`` apply when the index is created (see ``ensure_index``).
        """
        return writer.ingest(self, documents, encoder, batch_size=batch_size, rejects_path=rejects_path,
                             show_progress=show_progress, max_retries=max_retries, initial_backoff=initial_backoff,
                             max_backoff=max_backoff, shards=shards, replicas=replicas, bulk_timeout=bulk_timeout,
                             in_flight=in_flight)

    def delete(self, ids: Sequence[str], *, wait: bool | float = False) -> int:
        """Delete ``ids``; returns how many existed. Refreshes so counts and searches agree at
        once. ``wait`` is the contract's: a cluster has no write lock to wait for."""
        return writer.delete(self, ids)

    def document_problem(self, doc: Document) -> str | None:
        return document_problem(doc) or id_problem(str(doc.id), self.engine_name)

    # ---- helpers
    def query_vector(self, vector: np.ndarray) -> list[float]:
        """``vector`` prepared for the index's distance, as JSON numbers; wrong dims are refused."""
        vector = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if self.dim and vector.shape[1] != self.dim:
            raise ModelMismatchError(f"query vector has {vector.shape[1]} dims but index {self.index!r} holds {self.dim}")
        return prepare_vectors(vector, self.distance)[0].tolist()

    @staticmethod
    def _raw_hits(hits: list[dict]) -> list[Hit]:
        """Hits whose score is already "higher is better" on our scale (BM25, fused)."""
        return [Hit(h["_id"], float(h["_score"]), _stored_document(h)) for h in hits]

    def _to_hits(self, hits: list[dict]) -> list[Hit]:
        """kNN hits: both engines report l2 as 1/(1+d²), cosine as (1+cos)/2 and inner product as
        1+ip (ip >= 0) or 1/(1-ip); undone here so scores equal ``hybrid_qpr.distance.similarity``."""
        if not hits:
            return []
        scores = score_from_opensearch([h["_score"] for h in hits], self.distance)
        return [Hit(h["_id"], float(s), _stored_document(h)) for h, s in zip(hits, np.atleast_1d(scores))]


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


def _stored_document(hit: Mapping[str, Any]) -> Document | None:
    """The document of a search hit or ``_mget`` item that carries ``_source``, else None."""
    source = hit.get("_source")
    if source is None:
        return None
    return Document(hit["_id"], source.get(TEXT_FIELD, ""), source.get(METADATA_FIELD) or {})


def _typed_filter_value(field: str, kind: str, value: Any, index: str) -> Any:
    """``value`` as the mapping type ``kind`` of ``field`` needs it, or a ConfigError naming both."""
    if kind == "boolean":
        text = str(value).lower() if isinstance(value, (bool, str)) else None
        if text not in ("true", "false"):
            raise ConfigError(f"filter {field}={value!r}: field {field!r} holds booleans in index {index!r}; "
                              "use true or false")
        return text == "true"
    if kind in ("long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float", "unsigned_long"):
        if isinstance(value, bool):
            raise ConfigError(f"filter {field}={value!r}: field {field!r} holds numbers in index {index!r}; use a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"filter {field}={value!r}: field {field!r} holds numbers in index {index!r}; "
                              "use a number") from None
        return int(number) if number.is_integer() and kind not in ("double", "float", "half_float") else number
    if isinstance(value, bool):  # a keyword field compares text: JSON true means the string "true"
        return "true" if value else "false"
    return value


__all__ = ["ClusterBackend", "KNN_CANDIDATES", "reason"]
