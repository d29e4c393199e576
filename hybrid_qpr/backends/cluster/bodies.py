"""Request bodies both cluster engines share: index layout from ``mappings/``, BM25, filters, ids.

The kNN clause is the one body that differs between the engines (OpenSearch's ``knn``
query vs Elasticsearch's ``knn`` search section); it lives in each engine module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hybrid_qpr import resources
from hybrid_qpr.errors import BackendError, ConfigError
from hybrid_qpr.text.analysis import Analyzer
from hybrid_qpr.types import Filters

TEXT_FIELD, VECTOR_FIELD, METADATA_FIELD = "text", "embedding", "metadata"
# what a search returns of each hit's stored document: what a result shows (never the vector)
SOURCE_FIELDS = (TEXT_FIELD, METADATA_FIELD)
# The BM25 field of both engines: the terms of the index's analyzer (hybrid_qpr.text.analysis),
# space-separated, read by the core "whitespace" analyzer (Lucene has no NFKC filter without the
# ICU plugin; an Elasticsearch without its analysis-common module has no stemmer, no pattern
# tokenizer). An OpenSearch index made before analyzers ran BM25 on TEXT_FIELD with the legacy
# pattern analyzer server-side (LEGACY_OPENSEARCH_ANALYZER).
TOKENS_FIELD = "bm25_tokens"
TOKENS_ANALYZER = "whitespace"
LEGACY_OPENSEARCH_ANALYZER = "hybrid_qpr_words"
DEFAULT_SHARDS = 1
_PLACEHOLDER = re.compile(r"^\$\{([A-Z0-9_]+)\}$")
# responses trimmed to what the backends read: smaller JSON to send and to decode
# (and the failed shards' count: a search that lost a shard must not pass for a full answer)
SEARCH_FILTER = "hits.hits._id,hits.hits._score,hits.hits._source,_shards.failed"


def load_body(relative: str, values: Mapping[str, Any]) -> dict:
    """Read ``mappings/<relative>`` and replace every ``"${NAME}"`` string by ``values[NAME]``
    (typed: a number stays a number). A placeholder without a value is an error."""
    path = resources.mapping_file(relative)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BackendError(f"{path}: mapping file is missing from the installation") from exc

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fill(v) for v in node]
        if isinstance(node, str) and (match := _PLACEHOLDER.match(node)):
            if match.group(1) not in values:
                raise BackendError(f"{path}: no value for placeholder {node}")
            return values[match.group(1)]
        return node

    return fill(body)


def check_shards(shards: int, replicas: int) -> tuple[int, int]:
    if not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards={shards!r}: must be an integer >= 1")
    if not isinstance(replicas, int) or replicas < 0:
        raise ConfigError(f"replicas={replicas!r}: must be an integer >= 0")
    return shards, replicas


def filter_clauses(filters: Filters | None) -> list[dict]:
    """``{"lang": "en", "tag": ["a", "b"]}`` -> exact ``term``/``terms`` clauses on ``metadata.*``."""
    clauses = []
    for key, value in (filters or {}).items():
        if not isinstance(key, str) or not key or key.startswith(".") or key.endswith("."):
            raise ConfigError(f"filter field {key!r}: use a metadata field name such as 'lang' or 'source.site'")
        field = f"{METADATA_FIELD}.{key}"
        if isinstance(value, (list, tuple, set, frozenset)):
            values = list(value)
            if not values or any(v is None for v in values):
                raise ConfigError(f"filter {key}={value!r}: give at least one value and no nulls")
            clauses.append({"terms": {field: values}})
        elif value is None or isinstance(value, dict):
            raise ConfigError(f"filter {key}={value!r}: a filter value must be a string, number, boolean or a list")
        else:
            clauses.append({"term": {field: value}})
    return clauses


def bm25_values() -> dict[str, float]:
    """The index's BM25 similarity: the embedded index's k1 and b (Lucene's default k1 is 1.2),
    so the same corpus scores alike on every backend."""
    from hybrid_qpr.backends.local.bm25 import BM25_B, BM25_K1

    return {"BM25_K1": BM25_K1, "BM25_B": BM25_B}


def bm25_meta(analyzer: Analyzer) -> dict[str, Any]:
    """The mapping ``_meta.bm25`` of a new index: k1, b and the analyzer's record."""
    from hybrid_qpr.backends.local.bm25 import BM25_B, BM25_K1

    return {"k1": BM25_K1, "b": BM25_B, "field": TOKENS_FIELD, "analyzer": analyzer.record()}


def bm25_tokens(text: str, analyzer: Analyzer) -> str:
    """``text`` as the embedded BM25 sees it: its terms by ``analyzer`` joined by spaces.
    Whitespace analysis of this string (or the legacy OpenSearch pattern analysis of a
    legacy analyzer's terms) gives those terms back unchanged."""
    return " ".join(analyzer.analyze(text))


def bm25_query(query: str, filters: Filters | None, field: str, analyzer: Analyzer) -> dict:
    """A ``match`` query on ``field`` (the text is analysed, never parsed as query syntax) with
    exact filters. The query is analysed here as the embedded index does, so every backend
    scores the same terms."""
    return {"bool": {"must": [{"match": {field: {"query": bm25_tokens(query, analyzer)}}}],
                     "filter": filter_clauses(filters)}}


def source_param(with_documents: bool) -> list[str] | bool:
    """A search body's ``_source``: the ``SOURCE_FIELDS`` of each hit, or nothing."""
    return list(SOURCE_FIELDS) if with_documents else False


def bm25_body(query: str, depth: int, filters: Filters | None, field: str, analyzer: Analyzer,
              with_documents: bool = False) -> dict:
    return {"size": depth, "_source": source_param(with_documents), "track_total_hits": False,
            "query": bm25_query(query, filters, field, analyzer)}


def ids_body(ids: list[str], source: list[str] | bool = False) -> dict:
    """The documents ``ids`` (at most ``len(ids)`` hits), with the ``source`` fields asked for."""
    return {"size": len(ids), "_source": source, "track_total_hits": False, "query": {"ids": {"values": ids}}}
