"""Helpers shared by the search commands (ingest, query, delete, tune, evaluate, demo):
open the backend the options name and the encoder that fits it. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from hybrid_qpr.backends.base import Backend
    from hybrid_qpr.backends.cluster import ClusterBackend


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


def refuse_knn_options_on_a_cluster(connection: dict[str, Any], ef_search: int | None, nprobe: int | None) -> None:
    """``--ef-search``/``--nprobe`` are the embedded index's (``Capabilities.knn_search_settings``):
    refused, before any connection is made, when a cluster was chosen."""
    if use_cluster(connection) and (ef_search or nprobe):
        raise click.UsageError("--ef-search and --nprobe apply to a local index; a cluster index keeps its own "
                               "HNSW settings")


def open_backend(index: str, connection: dict[str, Any]) -> "Backend":
    """The local index directory ``index``, or the index ``index`` of the cluster chosen by
    ``--opensearch [URL]`` / ``--elasticsearch [URL]``. This module is the one place that names
    the backend classes (through ``connection.ENGINE_SPECS``): the commands use only the ``Backend`` contract."""
    cluster = open_cluster_index(index, connection)
    if cluster is not None:
        return cluster
    from hybrid_qpr.backends.local import LocalIndex

    return LocalIndex.open(index)


def open_cluster_index(index: str, connection: dict[str, Any]) -> "ClusterBackend | None":
    """The index ``index`` of the cluster chosen by ``--opensearch [URL]`` / ``--elasticsearch
    [URL]`` (None when neither was given), for what only a cluster index has (creation, drop)."""
    from hybrid_qpr.cli._common import chosen_engine, cluster_client

    engine = chosen_engine(connection)
    if engine is None:  # a local index: the cluster modules (and their clients) stay unimported
        return None
    from hybrid_qpr.backends.cluster.connection import ENGINE_SPECS, engine_module

    backend_class = getattr(engine_module(engine), ENGINE_SPECS[engine].backend_class)
    return backend_class(cluster_client(**connection), index)


def open_for_ingest(index: str, connection: dict[str, Any], model: str | None, *, faiss_kind: str, bm25_impl: str,
                    ef_search: int | None, nprobe: int | None, shards: int | None,
                    replicas: int | None, language: str | None = None) -> tuple["Backend", Any]:
    """The index ``index`` to ingest into and the encoder for it. An existing index keeps its
    model and its layout (a note names the creation options given for it); a missing one is
    created now with them (local: FAISS kind, BM25 scorer, kNN search settings; cluster:
    shards and replicas; both: the BM25 ``language``). An existing index analysed in another
    language than a ``language`` given is refused with the command that moves it."""
    backend = open_cluster_index(index, connection)
    if backend is not None:
        exists = backend.exists()
        encoder = load_encoder(model, backend if exists else None)
        if exists and (shards is not None or replicas is not None):
            click.echo(f"note: --shards/--replicas apply when an index is created; {index} exists and keeps its "
                       f"layout (to change it: 'hybrid-qpr index drop {index}', then ingest again)", err=True)
        backend.ensure_index(encoder, shards=shards, replicas=replicas, analyzer=language)
        return backend, encoder
    from hybrid_qpr.backends.local import LocalIndex, MANIFEST, SearchSettings

    if (Path(index) / MANIFEST).is_file():
        existing = LocalIndex.open(index)
        if language is not None:
            from hybrid_qpr.text.analysis import get_analyzer

            existing.check_analyzer(get_analyzer(language))
        if ef_search or nprobe:
            click.echo(f"note: --ef-search/--nprobe are stored when an index is created; {index} keeps "
                       f"{existing.search_settings}. Pass them to 'hybrid-qpr query' instead", err=True)
        return existing, load_encoder(model, existing)
    encoder = load_encoder(model)
    defaults = SearchSettings()
    search = SearchSettings(nprobe or defaults.nprobe, ef_search or defaults.ef_search)
    return LocalIndex.create(index, encoder, faiss=faiss_kind, bm25=bm25_impl, search=search, analyzer=language), encoder


def load_encoder(model: str | None, backend: "Backend | None" = None):
    """``--model`` if given; else the model the local index was built with (when it still
    exists); else the default model bundled with the package, which must then match the index (a
    model directory that is gone is named as gone, never suggested as the fix)."""
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.errors import ModelMismatchError

    gone = None
    if model is None and backend is not None:
        built_with = backend.model_dir
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
                f"{backend.model_fingerprint or '?'}), or query with --mode "
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
                                 f"docs/search.md]")(func)
    return decorate


def model_option(func):
    return click.option("--model", type=click.Path(file_okay=False), default=None,
                        help="Model name (fast, quality, or a bundled directory's name such as distilled-cnn-quora) or "
                             "encoder directory (model.onnx, tokenizer.json, config.json). [default: the model the "
                             "index was built with, else fast]")(func)


# ``--reranker`` given without a directory: the one 'tune' chose for the index (``tune`` itself
# chooses among the bundled cross-encoders)
TUNED_RERANKER = "@tuned"


def reranker_options(func):
    """``--reranker [DIR]`` and ``--reranker-depth N``: a cross-encoder second stage."""
    func = click.option("--reranker-depth", type=click.IntRange(min=1), default=None,
                        help="Hits of the first stage re-scored by --reranker (forces it where 'tune' chose depth 0). "
                             "[default: the depth 'tune' chose for this reranker on the index, else the one its "
                             "config.json carries, else 20]")(func)
    return click.option("--reranker", "reranker_dir", type=click.Path(file_okay=False), default=None, is_flag=False,
                        flag_value=TUNED_RERANKER, metavar="[DIR]",
                        help="Cross-encoder directory ('hybrid-qpr reranker export') or bundled reranker name: re-scores "
                             "the top --reranker-depth hits of whatever mode ran. Without DIR: the one 'tune --reranker' "
                             "chose for the index ('tune --reranker' alone chooses among the bundled ones).")(func)


def tuned_reranker_dir(backend) -> Path:
    """The directory of the reranker ``tune`` chose for ``backend``'s index: the bundled
    cross-encoder with the fingerprint its tuned defaults record (a one-line error without one)."""
    from hybrid_qpr.errors import ConfigError
    from hybrid_qpr.rerankers.cross_encoder import bundled_reranker

    tuned = (backend.fusion_defaults or {}).get("reranker") or {}
    if not tuned.get("model"):
        raise ConfigError("--reranker without a directory takes the reranker 'tune --reranker' chose for the "
                               "index, and this index has none: run 'hybrid-qpr tune ... --reranker', or give "
                               "--reranker DIR")
    directory = bundled_reranker(tuned["model"])
    if directory is None:
        raise ConfigError(f"the index's tuned reranker (model {tuned['model']}) is not one of the bundled "
                               "cross-encoders; give its directory: --reranker DIR")
    return directory


def load_reranker(reranker_dir: str | None, depth: int | None, backend, *, off_when_tuned_off: bool = False) -> tuple[Any, int]:
    """The reranker of ``--reranker`` (``None`` without it; ``TUNED_RERANKER``: the index's tuned
    one, ``tuned_reranker_dir``; a bundled reranker's name: that one) and its depth: ``--reranker-depth``,
    else the depth ``tune`` stored for this very reranker on the index, else the one its
    config.json carries ('tune --save-to-model'), else the default. Its interpolation with the
    first stage comes from the same place as the depth. A tuned depth of 0 (the reranker did
    not help): with ``off_when_tuned_off`` one line says so and no reranker is returned, else
    the default depth is used."""
    from hybrid_qpr.rerankers.cross_encoder import Interpolation
    from hybrid_qpr.search import DEFAULT_RERANKER_DEPTH

    if reranker_dir is None:
        if depth is not None:
            raise click.UsageError("--reranker-depth needs --reranker DIR")
        return None, DEFAULT_RERANKER_DEPTH
    if reranker_dir == TUNED_RERANKER:
        reranker_dir = str(tuned_reranker_dir(backend))
    elif not Path(reranker_dir).is_dir():
        from hybrid_qpr import resources

        reranker_dir = str(resources.resolve_model(reranker_dir))  # a bundled reranker's name
    from hybrid_qpr.rerankers import Reranker

    reranker = Reranker(reranker_dir)
    tuned = (backend.fusion_defaults or {}).get("reranker") or {}
    where = "the index's tuned defaults"
    if tuned.get("model") != reranker.fingerprint:
        tuned, where = reranker.tuned or {}, f"{reranker.model_dir}/config.json"
    if tuned:
        reranker.interpolation = Interpolation.of(tuned, where)
    if depth is None and tuned.get("depth") == 0:
        if off_when_tuned_off:
            click.echo(f"note: 'tune' found that {reranker_dir} does not help here ({where}: reranker depth 0, "
                       f"{tuned.get('metric', 'metric')} {tuned.get('without', float('nan')):.4f} without it); "
                       "searching without it (--reranker-depth N forces it)", err=True)
            return None, DEFAULT_RERANKER_DEPTH
        reranker.interpolation = Interpolation()
    if depth is None:
        depth = int(tuned.get("depth") or 0)
    return reranker, depth or DEFAULT_RERANKER_DEPTH
