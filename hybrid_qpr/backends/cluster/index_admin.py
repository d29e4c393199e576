"""What ``ClusterBackend`` knows and does to its index as a whole: the mapping's ``_meta`` (the
model facts and the tuned fusion defaults), its settings (shards, result window), the metadata
fields, BM25's field and analyzer, the checks of an encoder against the mapping, and the index's
lifecycle (created whole or not at all, dropped)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid_qpr.backends.cluster.bodies import (DEFAULT_SHARDS, LEGACY_OPENSEARCH_ANALYZER, METADATA_FIELD,
                                                TEXT_FIELD, TOKENS_ANALYZER, TOKENS_FIELD, VECTOR_FIELD, check_shards)
from hybrid_qpr.backends.cluster.connection import HttpFailure, translate
from hybrid_qpr.backends.cluster.sending import RequestSending
from hybrid_qpr.distance import Distance, check_distance
from hybrid_qpr.errors import BackendError, ClusterError, ConfigError, ModelMismatchError
from hybrid_qpr.text.analysis import Analyzer, get_analyzer, legacy_note, refuse_another
from hybrid_qpr.types import TextEncoder

logger = logging.getLogger(__name__)

DEFAULT_RESULT_WINDOW = 10_000  # index.max_result_window unless the index sets another
# seconds index creation waits for its shards to start (the engines' default is also 30), and
# how much longer the client waits for the answer
CREATE_WAIT_SECONDS = 30
CREATE_ANSWER_MARGIN = 30


class IndexAdministration(RequestSending):
    """The index facts and lifecycle of ``ClusterBackend`` (see the module docstring)."""

    # the engine module's (ClusterBackend lists them): index_body, vector_field_problems, vector_type
    vector_type: str
    _settings: dict[str, str] | None
    _meta: dict[str, Any] | None

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

    def refresh_index(self) -> None:
        """Make what was written searchable (the engine's ``_refresh``)."""
        self.request("POST", self.path("_refresh"), what="refreshing")

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

    def check_encoder(self, encoder: TextEncoder) -> None:
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

    def layout_problems(self, meta: Mapping[str, Any], encoder: TextEncoder) -> list[str]:
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

    def ensure_index(self, encoder: TextEncoder, *, shards: int | None = None, replicas: int | None = None,
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
