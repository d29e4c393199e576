"""Helpers shared by the search-engine commands (ingest, query, delete, tune, evaluate, demo):
open the backend the options name and the encoder that fits it. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


FILTER_HELP = ("Exact-match metadata filter FIELD=VALUE (repeatable; the same field twice means either value), "
               "applied before ranking so k results still come back. true/false match JSON booleans (never 1/0); a "
               "list-valued field matches when any element does; a field no document has is refused. "
               "Example: --filter topic=account")


def parse_filters(values: tuple[str, ...]) -> dict[str, Any] | None:
    """``("topic=a", "topic=b", "lang=en")`` -> ``{"topic": ["a", "b"], "lang": "en"}``."""
    from hybrid_qpr.filters import parse_filter_items

    return parse_filter_items(values)


def use_cluster(connection: dict[str, Any]) -> bool:
    """True when ``--opensearch [URL]`` or ``--elasticsearch [URL]`` chose a cluster index."""
    from hybrid_qpr.cli._common import chosen_engine

    return chosen_engine(connection) is not None


def open_backend(index: str, connection: dict[str, Any]):
    """The local index directory ``index``, or the index ``index`` of the cluster chosen by
    ``--opensearch [URL]`` / ``--elasticsearch [URL]``."""
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
    exists); else the default model bundled with the package, which must then match the index (a
    model directory that is gone is named as gone, never suggested as the fix)."""
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.errors import ModelMismatchError

    gone = None
    if model is None and backend is not None:
        built_with = getattr(backend, "model_dir", None)
        if built_with and Path(built_with).is_dir():
            model = built_with
        elif built_with:
            gone = built_with
    encoder = Encoder.load(model)
    if gone:
        try:
            backend.check_encoder(encoder)
        except ModelMismatchError:
            raise ModelMismatchError(
                f"the model this index was built with is gone (nothing at {gone}), and the default model "
                f"{encoder.model_dir} is another one. Fix: pass --model DIR with the index's model (fingerprint "
                f"{getattr(backend, 'manifest', {}).get('model', {}).get('fingerprint', '?')}), or query with --mode "
                "bm25, which needs no model") from None
    return encoder


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
                             "index was built with, else the default model bundled with the package (the distilled CNN)]")(func)
