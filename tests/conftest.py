"""Shared fixtures. The OpenSearch node for tests marked ``cluster`` is found, in order:

1. ``$HYBRID_QPR_OPENSEARCH_URL`` (scripts/test sets it to the node it started);
2. the local node of ``hybrid-qpr node start`` when it is running;
3. a testcontainers OpenSearch 2.19 container when a Docker engine answers.

The Elasticsearch node likewise: ``$HYBRID_QPR_ELASTICSEARCH_URL``, else the local node of
``hybrid-qpr node start --engine elasticsearch``.

One fixture family serves every cluster test: ``cluster_engine`` -> ``cluster_url`` ->
``cluster_client`` -> ``cluster_backend`` (a fresh index, dropped afterwards) and
``cluster_local_node``. A test using them runs once per engine; ``@pytest.mark.engines("opensearch")``
(or ``"elasticsearch"``) keeps a test of one engine's own features to that engine.

With none reachable the cluster tests skip - except when ``$CI`` is set: then they fail,
so a CI run can never pass without really exercising both engines. Likewise a test skipped
by ``pytest.importorskip`` for a missing optional package fails when ``$CI`` is set.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import uuid

import pytest

CONTAINER_IMAGE = "opensearchproject/opensearch:2.19.1"


CLUSTER_ENGINES = ("opensearch", "elasticsearch")


def _answers(url: str) -> bool:
    """A search node answers cluster health at ``url`` (the Maven Central Elasticsearch has no
    rest-root: ``GET /`` is 405 there, so both engines are probed the same way)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/_cluster/health", timeout=5) as response:
            return "cluster_name" in json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _unreachable(message: str):
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so cluster tests must not skip)")
    pytest.skip(message)


# A test needing an optional package guards itself with ``pytest.importorskip`` (a core install
# runs the rest). Under CI the full install provides every such package, so a skip for a
# missing one is a failure there: it would hide a broken install or extra.
MISSING_PACKAGE = "could not import"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _fail_missing_package_skips_in_ci(report) -> None:
    if os.environ.get("CI") and report.skipped and MISSING_PACKAGE in _skip_reason(report):
        report.outcome = "failed"
        report.longrepr = (_skip_reason(report) + " (CI is set: the full install provides every optional "
                           "package, so a test must not skip for a missing one)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_missing_package_skips_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_missing_package_skips_in_ci(outcome.get_result())


def _docker_answers() -> bool:
    try:
        import docker

        return bool(docker.from_env(timeout=3).ping())
    except Exception:  # no docker package, no socket, no permission: all mean "no engine"
        return False


@pytest.fixture(scope="session")
def opensearch_url():
    tried = []
    url = os.environ.get("HYBRID_QPR_OPENSEARCH_URL")
    if url:
        if _answers(url):
            yield url.rstrip("/")
            return
        tried.append(f"$HYBRID_QPR_OPENSEARCH_URL={url} does not answer")
    else:
        tried.append("$HYBRID_QPR_OPENSEARCH_URL is unset")

    from hybrid_qpr.localnode import LocalNode

    status = LocalNode().status()
    if status.running:
        yield status.url
        return
    tried.append(f"no local node at {status.url} (start one with 'hybrid-qpr node start')")

    if _docker_answers():
        from testcontainers.opensearch import OpenSearchContainer

        container = OpenSearchContainer(CONTAINER_IMAGE).with_env("OPENSEARCH_JAVA_OPTS", "-Xms1g -Xmx1g")
        with container:
            config = container.get_config()
            yield f"http://{config['host']}:{config['port']}"
        return
    tried.append("no Docker engine for testcontainers")

    _unreachable("no OpenSearch node reachable: " + "; ".join(tried))


@pytest.fixture(scope="session")
def elasticsearch_url():
    url = os.environ.get("HYBRID_QPR_ELASTICSEARCH_URL")
    if url:
        if _answers(url):
            return url.rstrip("/")
        _unreachable(f"no Elasticsearch node reachable: $HYBRID_QPR_ELASTICSEARCH_URL={url} does not answer")
    from hybrid_qpr.localnode import LocalNode

    status = LocalNode(engine="elasticsearch").status()
    if status.running:
        return status.url
    _unreachable(f"no Elasticsearch node reachable: $HYBRID_QPR_ELASTICSEARCH_URL is unset and no local node at "
                 f"{status.url} (start one with 'hybrid-qpr node start --engine elasticsearch')")


def pytest_configure(config):
    config.addinivalue_line("markers", "engines(*names): run a test that uses the cluster fixtures against these "
                                       "engines only (default: opensearch and elasticsearch)")
    config.addinivalue_line("markers", "browser: needs headless Chromium (Debian's chromium and chromium-driver) "
                                       "and selenium")


def pytest_generate_tests(metafunc):
    """``cluster_engine``: each engine in turn, so a test using the cluster fixtures runs once
    against OpenSearch and once against Elasticsearch; ``@pytest.mark.engines("opensearch")``
    keeps a test of one engine's own features to that engine."""
    if "cluster_engine" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("engines")
        engines = marker.args if marker else CLUSTER_ENGINES
        unknown = set(engines) - set(CLUSTER_ENGINES)
        assert not unknown, f"unknown engines {sorted(unknown)}: choose from {CLUSTER_ENGINES}"
        metafunc.parametrize("cluster_engine", engines, scope="session")


@pytest.fixture(scope="session")
def cluster_url(cluster_engine, request) -> str:
    return request.getfixturevalue(f"{cluster_engine}_url")


@pytest.fixture(scope="session")
def cluster_client(cluster_engine, cluster_url):
    """A checked client of ``cluster_engine`` (opensearch-py or elasticsearch-py)."""
    import importlib

    return importlib.import_module(f"hybrid_qpr.backends.{cluster_engine}").connect(cluster_url)


@pytest.fixture()
def cluster_backend(cluster_engine, cluster_client):
    """An ``OpenSearchBackend`` or ``ElasticsearchBackend`` on a fresh index, dropped afterwards."""
    from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend
    from hybrid_qpr.backends.opensearch import OpenSearchBackend

    cls = OpenSearchBackend if cluster_engine == "opensearch" else ElasticsearchBackend
    backend = cls(cluster_client, f"hqpr-test-{uuid.uuid4().hex[:10]}")
    yield backend
    backend.drop()


@pytest.fixture(scope="session")
def cluster_local_node(cluster_engine, cluster_url):
    """The ``LocalNode`` serving ``cluster_url``, or None when the node is not ours to stop."""
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode() if cluster_engine == "opensearch" else LocalNode(engine="elasticsearch")
    return node if node.status().running and node.url == cluster_url else None


@pytest.fixture(scope="session")
def committed_encoder():
    """The encoder committed in onnx/ (``Encoder.load(None)``); ``$HYBRID_QPR_TEST_MODEL``
    may point at another model directory while that one is being trained."""
    from hybrid_qpr.encoders import Encoder

    return Encoder.load(os.environ.get("HYBRID_QPR_TEST_MODEL") or None)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory):
    """A cross-encoder on a tiny randomly initialised BERT (torch), its head spread so orders are
    not ties: built once for the reranker tests of every folder (tests leave it as they found it)."""
    import torch

    from hybrid_qpr.model.cross_encoder import CrossEncoder
    from hybrid_qpr.testing.rerankers import tiny_bert

    model = CrossEncoder.from_dir(tiny_bert(tmp_path_factory.mktemp("tiny-bert")), max_length=48, query_tokens=16,
                                  pooling="segments")
    torch.nn.init.normal_(model.head.weight, std=1.0)  # spread the scores so orders are not ties
    return model.eval()


@pytest.fixture(scope="session")
def exported_tiny_cross_encoder(tiny_cross_encoder, tmp_path_factory):
    """``tiny_cross_encoder`` exported to ONNX: (its directory, the export's config)."""
    from hybrid_qpr.export.cross_encoder import export_cross_encoder

    out = tmp_path_factory.mktemp("reranker") / "fp32"
    config = export_cross_encoder(tiny_cross_encoder, out)
    return out, config


@pytest.fixture(scope="session")
def question_bank():
    """200 synthetic questions (20 subjects x 10 phrasings) with metadata for filter tests:
    ``lang`` alternates en/de, ``topic`` is the subject, ``n`` the position (``corpora.question_bank``)."""
    from hybrid_qpr.testing.corpora import question_bank

    return question_bank()


@pytest.fixture(scope="session")
def held_out_queries():
    """Phrasings that are not in ``question_bank``, one per subject."""
    from hybrid_qpr.testing.corpora import held_out_questions

    return held_out_questions()


@pytest.fixture(scope="session")
def three_nodes():
    """The local three-node OpenSearch cluster (``hybrid-qpr node start --nodes 3``, 512 MB
    heap per node) on ``$HYBRID_QPR_MULTINODE_PORT`` (default 9210): started at first use, or
    joined while the start scripts/test launched in the background is under way (a failure to
    start is an error, never a skip), its stopped nodes restarted by ``start()``, and stopped at
    the end of the test run if this run started it."""
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(nodes=3, port=int(os.environ.get("HYBRID_QPR_MULTINODE_PORT", "9210")))
    started = not node.start(timeout=300)["already_running"]
    yield node
    if started:
        node.stop()


@pytest.fixture()
def trio(three_nodes):
    """``three_nodes`` with all three nodes up and green: a node an earlier test killed is
    restarted first, so no test inherits another's damage."""
    import json
    import urllib.request

    three_nodes.start(timeout=300)
    url = three_nodes.url + "/_cluster/health?wait_for_nodes=3&wait_for_status=green&timeout=120s"
    with urllib.request.urlopen(url, timeout=150) as response:
        json.loads(response.read().decode("utf-8"))
    return three_nodes
