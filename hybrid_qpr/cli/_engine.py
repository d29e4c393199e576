"""Helpers shared by the search-engine commands (ingest, query, delete, tune, evaluate, demo):
open the backend the options name and the encoder that fits it. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hybrid_qpr.errors import ConfigError

FILTER_HELP = ("Exact-match metadata filter FIELD=VALUE (repeatable; the same field twice means either value), "
               "applied before ranking so k results still come back. true/false match JSON booleans (never 1/0); a "
               "list-valued field matches when any element does; a field no document has is refused. "
               "Example: --filter topic=account")


def parse_filters(values: tuple[str, ...]) -> dict[str, Any] | None:
    """``("topic=a", "topic=b", "lang=en")`` -> ``{"topic": ["a", "b"], "lang": "en"}``."""
    filters: dict[str, Any] = {}
    for item in values:
        field, sep, value = item.partition("=")
        if not sep or not field.strip():
            raise ConfigError(f"--filter {item!r}: expected FIELD=VALUE, e.g. --filter topic=account")
        field = field.strip()
        if field in filters:
            previous = filters[field]
            filters[field] = (previous if isinstance(previous, list) else [previous]) + [value]
        else:
            filters[field] = value
    return filters or None


def quiet_bm25s() -> None:
    """bm25s sets its own logger to DEBUG when imported; keep its chatter out of the CLI
    unless -vv asked for debug output (the CLI, not the library, owns log levels)."""
    import logging

    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        try:
            import bm25s  # noqa: F401  (its import is what sets the level)
        except ImportError:
            return
        logging.getLogger("bm25s").setLevel(logging.WARNING)


def use_cluster(connection: dict[str, Any]) -> bool:
    """True when ``--opensearch [URL]`` or ``--elasticsearch [URL]`` chose a cluster index."""
    from hybrid_qpr.cli._common import chosen_engine

    return chosen_engine(connection) is not None


def open_backend(index: str, connection: dict[str, Any]):
    """The local index directory ``index``, or the index ``index`` of the cluster chosen by
    ``--opensearch [URL]`` / ``--elasticsearch [URL]``."""
    quiet_bm25s()
    from hybrid_qpr.cli._common import chosen_engine, cluster_client

    engine = chosen_engine(connection)
    if engine == "opensearch":
        from hybrid_qpr.backends.opensearch import OpenSearchBackend

        return OpenSearchBackend(cluster_client(**connection), index)
    if engine == "elasticsearch":
        from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend

        return ElasticsearchBackend(cluster_client(**connection), index)
    from hybrid_qpr.backends.local import LocalIndex

    return LocalIndex.open(index)


def load_encoder(model: str | None, backend=None):
    """``--model`` if given; else the model the local index was built with (when it still
    exists); else the model committed in ``onnx/``."""
    from hybrid_qpr.encoders import Encoder

    if model is None and backend is not None:
        built_with = getattr(backend, "model_dir", None)
        if built_with and Path(built_with).is_dir():
            model = built_with
    return Encoder.load(model)


def knn_search_options(stored: str):
    """``--ef-search`` and ``--nprobe``: the local index's kNN speed/recall trade-off (``stored``
    says whether the value is stored at creation or applies to this query only)."""
    def decorate(func):
        func = click.option("--nprobe", type=click.IntRange(min=1), default=None,
                            help=f"Local index, IVF segments (--faiss ivf): lists probed per search, {stored}. "
                                 "[default: 10]")(func)
        return click.option("--ef-search", type=click.IntRange(min=1), default=None,
                            help=f"Local index, HNSW segments: candidate list per search (more = higher recall, "
                                 f"slower), {stored}. [default: measured per segment when its graph is built: the "
                                 f"smallest that finds 0.97 of the exact top 10 of a sample of its own vectors; "
                                 f"docs/engine.md]")(func)
    return decorate


def model_option(func):
    return click.option("--model", type=click.Path(file_okay=False), default=None,
                        help="Encoder directory (model.onnx, tokenizer.json, config.json). [default: the model the "
                             "index was built with, else the one committed in onnx/]")(func)


def reranker_options(func):
    """``--reranker DIR`` and ``--reranker-depth N``: a cross-encoder second stage."""
    func = click.option("--reranker-depth", type=click.IntRange(min=1), default=None,
                        help="Hits of the first stage re-scored by --reranker. [default: the depth 'tune' chose for "
                             "this reranker on the index, else 20]")(func)
    return click.option("--reranker", "reranker_dir", type=click.Path(file_okay=False), default=None,
                        help="Cross-encoder directory ('hybrid-qpr reranker export'): re-scores the top "
                             "--reranker-depth hits of whatever mode ran.")(func)


def load_reranker(reranker_dir: str | None, depth: int | None, backend) -> tuple[Any, int]:
    """The reranker of ``--reranker`` (``None`` without it) and its depth: ``--reranker-depth``,
    else the depth ``tune`` stored for this very reranker on the index, else the default."""
    from hybrid_qpr.search import DEFAULT_RERANKER_DEPTH

    if reranker_dir is None:
        if depth is not None:
            raise click.UsageError("--reranker-depth needs --reranker DIR")
        return None, DEFAULT_RERANKER_DEPTH
    from hybrid_qpr.rerankers import Reranker

    reranker = Reranker(reranker_dir)
    if depth is None:
        tuned = (backend.fusion_defaults or {}).get("reranker") or {}
        depth = int(tuned.get("depth") or 0) if tuned.get("model") == reranker.fingerprint else 0
    return reranker, depth or DEFAULT_RERANKER_DEPTH
