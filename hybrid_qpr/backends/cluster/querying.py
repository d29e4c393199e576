"""``ClusterBackend``'s read side: the BM25 and kNN searches and their bodies, both lists in one
``_msearch``, documents by id, filters checked against the mapping's types, and hits on the
embedded index's score scale."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hybrid_qpr.backends.cluster.bodies import METADATA_FIELD, TEXT_FIELD, bm25_body
from hybrid_qpr.backends.cluster.index_admin import IndexAdministration
from hybrid_qpr.backends.cluster.ties import by_score_then_id, fetch_size, top_with_ties_by_id
from hybrid_qpr.distance import prepare_vectors, score_from_opensearch
from hybrid_qpr.errors import ConfigError, ModelMismatchError
from hybrid_qpr.types import Candidates, Document, Filters, Hit, QueryVector

MAX_KNN_K = 10_000  # both engines' limit on a kNN search's k and num_candidates


class IndexQueries(IndexAdministration):
    """The searches of ``ClusterBackend`` (see the module docstring)."""

    # the engine module's (ClusterBackend lists them): knn_body, vector_scores
    search_type: str
    documents_in_hits: bool
    bm25_score_scale: float

    def bm25_search_type(self) -> str:
        """The ``search_type`` of a search that scores BM25 (see the class docstring)."""
        if self.search_type != "auto":
            return self.search_type
        return "dfs_query_then_fetch" if self.shards > 1 else "query_then_fetch"

    def _bm25_params(self) -> dict[str, str]:
        return {"search_type": self.bm25_search_type()}

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

    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """BM25 via a ``match`` query: the text is analysed, never parsed as query syntax."""
        self.check_depth(depth, knn=False)
        filters = self.checked_filters(filters)
        return top_with_ties_by_id(lambda size: self._bm25_fetch(query, size, filters), depth, self.max_result_window)

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by HNSW; filters run inside the graph search (so ``depth`` hits still come back)."""
        self.check_depth(depth, knn=True)
        filters = self.checked_filters(filters)
        return by_score_then_id(self._to_hits(self._search(self.knn_body(vector, depth, filters), "kNN search")))

    def bm25_and_knn(self, query: str, vector: QueryVector, depth: int,
                     filters: Filters | None = None) -> Candidates:
        """``bm25`` and ``knn`` in one ``_msearch`` round trip (client-side hybrid's candidates)."""
        self.check_depth(depth, knn=True)
        filters = self.checked_filters(filters)
        bm25_size = fetch_size(depth, self.max_result_window)
        bm25_hits, knn_hits = self._msearch([self._bm25_body(query, bm25_size, filters),
                                             self.knn_body(vector.get(), depth, filters)],
                                            ["BM25 search", "kNN search"], [self._bm25_params(), {}])
        bm25 = top_with_ties_by_id(lambda size: self._bm25_fetch(query, size, filters), depth, self.max_result_window,
                                   first=self._bm25_hits(bm25_hits))
        return Candidates.of_hits(bm25, by_score_then_id(self._to_hits(knn_hits)))

    def _bm25_fetch(self, query: str, size: int, filters: Filters | None) -> list[Hit]:
        return self._bm25_hits(self._search(self._bm25_body(query, size, filters), "BM25 search", self._bm25_params()))

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
