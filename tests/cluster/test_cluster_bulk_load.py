"""Bulk-load settings of a cluster ingest (``hybrid_qpr.backends.cluster.loading``), once per engine
on the real node: refresh off while an ingest fills the index it created, the
index's own settings back afterwards - after a failed ingest too -, an index left marked by an
ingest that died restored by the next one, and an existing index's settings never touched."""

from __future__ import annotations

import time

import pytest

from hybrid_qpr.backends.cluster import loading
from hybrid_qpr.errors import BackendError
from hybrid_qpr.testing.faultproxy import FaultProxy, Faults
from hybrid_qpr.types import Document

pytestmark = pytest.mark.cluster


def settings(backend) -> dict:
    """The index's own refresh_interval (None: the engine's default) and number_of_replicas."""
    answer = backend.transport.request("GET", backend.path("_settings"))
    index = next(iter(answer.values()))["settings"]["index"]
    return {"refresh_interval": index.get("refresh_interval"), "number_of_replicas": index["number_of_replicas"]}


def watching(documents, backend, seen: list):
    """``documents``, noting the index's settings once the ingest is under way (document 60:
    the index exists and earlier batches were sent)."""
    for i, doc in enumerate(documents):
        if i == 60:
            seen.append(settings(backend))
        yield doc


def test_an_ingest_loads_a_new_index_with_refresh_off_and_restores_its_settings(cluster_backend, committed_encoder,
                                                                              question_bank):
    seen: list = []
    report = cluster_backend.ingest(watching(question_bank, cluster_backend, seen), committed_encoder,
                                    batch_size=20, show_progress=False)
    assert seen == [{"refresh_interval": "-1", "number_of_replicas": "0"}]
    assert settings(cluster_backend) == {"refresh_interval": None, "number_of_replicas": "0"}
    assert loading.MARK not in cluster_backend.refresh_meta()
    assert report.indexed == len(question_bank) == cluster_backend.count()  # refreshed at the end all the same


def test_an_existing_index_keeps_its_settings_during_and_after_an_ingest(cluster_backend, committed_encoder,
                                                                          question_bank):
    cluster_backend.ingest(question_bank[:50], committed_encoder, show_progress=False)
    cluster_backend.request("PUT", cluster_backend.path("_settings"), {"index": {"refresh_interval": "7s"}},
                            what="setting a refresh interval")
    seen: list = []
    report = cluster_backend.ingest(watching(question_bank, cluster_backend, seen), committed_encoder,
                                    batch_size=20, show_progress=False)
    assert seen == [{"refresh_interval": "7s", "number_of_replicas": "0"}]
    assert settings(cluster_backend) == {"refresh_interval": "7s", "number_of_replicas": "0"}
    assert report.indexed == len(question_bank) - 50 and cluster_backend.count() == len(question_bank)


def test_a_failed_ingest_restores_the_settings(cluster_backend, cluster_url, committed_encoder, question_bank):
    engine = type(cluster_backend)
    module = __import__(engine.__module__, fromlist=["connect"])
    with FaultProxy(cluster_url, Faults(refuse_after=2)) as proxy:
        through = engine(module.connect(proxy.url), cluster_backend.index)
        with pytest.raises(BackendError, match="permission denied"):
            through.ingest(question_bank, committed_encoder, batch_size=20, show_progress=False, in_flight=1)
    assert settings(cluster_backend) == {"refresh_interval": None, "number_of_replicas": "0"}
    assert loading.MARK not in cluster_backend.refresh_meta()
    # the two requests let through, shown by the node's own refreshes again (no explicit refresh here)
    deadline = time.monotonic() + 30
    while cluster_backend.count() != 40 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster_backend.count() == 40


def test_an_index_left_marked_by_a_dead_ingest_is_loaded_and_restored_by_the_next(cluster_backend, committed_encoder,
                                                                                  question_bank):
    cluster_backend.ingest(question_bank[:10], committed_encoder, show_progress=False)
    # what an ingest killed after begin() leaves: the mark and the load settings
    assert loading.begin(cluster_backend, created=True) == {"refresh_interval": None}
    assert settings(cluster_backend)["refresh_interval"] == "-1"
    seen: list = []
    documents = [Document(f"more-{d.id}", d.text, d.metadata) for d in question_bank]
    cluster_backend.ingest(watching(documents, cluster_backend, seen), committed_encoder, batch_size=20,
                           show_progress=False)
    assert seen == [{"refresh_interval": "-1", "number_of_replicas": "0"}]  # it went on loading
    assert settings(cluster_backend) == {"refresh_interval": None, "number_of_replicas": "0"}
    assert loading.MARK not in cluster_backend.refresh_meta()
    assert cluster_backend.count() == 10 + len(documents)
