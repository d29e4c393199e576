"""DBSF, min-max bounds, business signals and autocut rank alike on the embedded index,
OpenSearch and Elasticsearch: the same top 10 (ties aside) on a small corpus with a date
(``created``) and a number (``votes``) in its metadata. Server-side fusion refuses what only
the client side can do, in one line."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.signals import Decay, Signals

BACKENDS = ("local", pytest.param("opensearch", marks=pytest.mark.cluster),
            pytest.param("elasticsearch", marks=pytest.mark.cluster))
QUERIES = ("how do i change my email address?", "how can i update my phone number?", "reset password")
SETTINGS = {
    "dbsf": dict(fusion="dbsf", alpha=0.5),
    "dbsf+decay": dict(fusion="dbsf", alpha=0.3, signals=Signals(
        {"votes": 0.002}, Decay("created", "gauss", "2024-06-01", "20d", "2d", 0.4), weight=0.3)),
    "minmax+bounds+exp": dict(fusion="minmax", alpha=0.5, bounds={"knn": {"lower": "clip:0.3"}},
                              signals=Signals(decay=Decay("votes", "exp", 100.0, 25.0), weight=0.2)),
    "zscore+linear+autocut": dict(fusion="zscore", alpha=0.5, autocut=2,
                                  signals=Signals(decay=Decay("created", "linear", "2024-12-31", "200d"), weight=0.5)),
}
# RRF is left out: it reads ranks, and this corpus's BM25 lists hold runs of equal scores that each
# engine orders its own way (the embedded index by id, a cluster by its segments).


def dated_bank(question_bank):
    return [d._replace(metadata={**d.metadata, "created": f"2024-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}",
                                 "votes": (i * 37) % 101}) for i, d in enumerate(question_bank)]


@pytest.fixture(scope="module")
def local_searcher(tmp_path_factory, committed_encoder, question_bank):
    from hybrid_qpr.backends.local import LocalIndex

    idx = LocalIndex.create(tmp_path_factory.mktemp("fusion") / "idx", committed_encoder)
    idx.ingest(dated_bank(question_bank), committed_encoder, show_progress=False)
    yield HybridSearcher(idx, committed_encoder)
    idx.close()


@pytest.fixture(params=BACKENDS)
def searcher(request, local_searcher, committed_encoder, question_bank):
    if request.param == "local":
        yield local_searcher
        return
    import importlib

    engine = importlib.import_module(f"hybrid_qpr.backends.{request.param}")
    cls = engine.OpenSearchBackend if request.param == "opensearch" else engine.ElasticsearchBackend
    backend = cls(engine.connect(request.getfixturevalue(f"{request.param}_url")), f"hqpr-fusion-{uuid.uuid4().hex[:10]}")
    try:
        backend.ingest(dated_bank(question_bank), committed_encoder, batch_size=64, show_progress=False)
        yield HybridSearcher(backend, committed_encoder)
    finally:
        backend.drop()
        backend.close()


def _canonical(results):
    """Ids in rank order with exact ties (to 5 significant digits) put in id order."""
    return [r.id for r in sorted(results, key=lambda r: (-float(f"{r.score:.5g}"), r.id))]


@pytest.mark.parametrize("name", SETTINGS)
def test_every_backend_gives_the_same_top_10(searcher, local_searcher, name):
    for query in QUERIES:
        got = searcher.search(query, top_k=10, **SETTINGS[name])
        expected = local_searcher.search(query, top_k=10, **SETTINGS[name])
        assert got, (name, query)
        assert _canonical(got) == _canonical(expected), (name, query, [(r.id, r.score, r.bm25, r.knn) for r in got],
                                                         [(r.id, r.score, r.bm25, r.knn) for r in expected])
        assert [r.score for r in got] == pytest.approx([r.score for r in expected], rel=1e-4, abs=1e-6)
        assert all((r.signals is not None) == bool(SETTINGS[name].get("signals")) for r in got)


@pytest.mark.cluster
@pytest.mark.engines("opensearch")
def test_server_side_refuses_what_runs_client_side_only(cluster_backend, cluster_url, committed_encoder, question_bank):
    from hybrid_qpr.cli.main import cli

    cluster_backend.ingest(dated_bank(question_bank)[:40], committed_encoder, batch_size=64, show_progress=False)
    searcher = HybridSearcher(cluster_backend, committed_encoder)
    query = QUERIES[0]
    for extra, message in ((dict(fusion="dbsf"), "fusion dbsf runs client-side only"),
                           (dict(fusion="minmax", bounds={"knn": {"lower": "clip:0.3"}}), "bounds run client-side only"),
                           (dict(signals=Signals({"votes": 0.1})), "business signals (--boost, --decay) run client-side")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            searcher.search(query, server_side=True, **extra)
    # autocut works on the engine's fused list too, and never drops its top hit
    whole = searcher.search(query, server_side=True, fusion="minmax", top_k=10)
    cut = searcher.search(query, server_side=True, fusion="minmax", top_k=10, autocut=1)
    assert cut and cut[0].id == whole[0].id and len(cut) <= len(whole)
    out = CliRunner().invoke(cli, ["search-pipeline", "install", "--opensearch", cluster_url, "--fusion", "dbsf"])
    assert out.exit_code == 1 and "dbsf: client-side only, there is no search pipeline to install" in out.output
    out = CliRunner().invoke(cli, ["search-pipeline", "install", "--opensearch", cluster_url])
    assert out.exit_code == 0 and "hybrid-qpr-dbsf: not installed: dbsf runs client-side only" in out.output
    assert "hybrid-qpr-minmax: installed" in out.output
    bad = CliRunner().invoke(cli, ["query", query, "--index", cluster_backend.index, "--opensearch", cluster_url,
                                   "--server-side", "--fusion", "dbsf"])
    assert bad.exit_code == 1 and "runs client-side only" in bad.output and "Traceback" not in bad.output
