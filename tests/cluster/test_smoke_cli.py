"""Smoke test of the whole OpenSearch path through the CLI: pipelines, ingest, every query mode
(client and server side), re-ingest without duplicates, delete.

Marked ``smoke``: scripts/test runs it against OpenSearch 3.6.0 with the rest of the suite, and
again (with every other ``smoke`` test) against OpenSearch 2.19.6, the older line teams still run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.opensearch import OpenSearchBackend
from hybrid_qpr.cli.main import cli
from hybrid_qpr.fusion import DEFAULT_ALPHA

QUESTIONS = Path(__file__).resolve().parents[2] / "examples" / "questions.jsonl"


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _count(client, index: str) -> int:
    client.indices.refresh(index=index)
    return client.count(index=index)["count"]


@pytest.mark.cluster
@pytest.mark.smoke
@pytest.mark.engines("opensearch")
def test_cli_ingest_query_every_mode_and_pipelines(cluster_url, cluster_client, cluster_backend):
    opensearch_url, opensearch_client, index = cluster_url, cluster_client, cluster_backend.index  # dropped afterwards
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    version = opensearch_client.info()["version"]["number"]
    _run("ingest", str(QUESTIONS), "--opensearch", opensearch_url, "--index", index)
    assert _count(opensearch_client, index) == len(lines)
    _run("ingest", str(QUESTIONS), "--opensearch", opensearch_url, "--index", index)  # same ids: replaced
    assert _count(opensearch_client, index) == len(lines)

    output = _run("search-pipeline", "install", "--opensearch", opensearch_url, "--index", index)
    pipelines = opensearch_client.transport.perform_request("GET", "/_search/pipeline/hybrid-qpr-*")
    expected = {"hybrid-qpr-minmax", "hybrid-qpr-l2"}
    # the pipelines take the index's alpha (the model's fusion defaults, adopted at ingest)
    alpha = OpenSearchBackend(opensearch_client, index).fusion_defaults.get("alpha", DEFAULT_ALPHA)
    if not version.startswith("2."):
        expected |= {"hybrid-qpr-zscore", "hybrid-qpr-rrf"}  # neural-search has z_score and weighted RRF since 3.0
    elif alpha == DEFAULT_ALPHA:
        expected.add("hybrid-qpr-rrf")  # 2.19's RRF has no weights: only equal ones
    else:
        assert "hybrid-qpr-rrf: rejected by the cluster" in output, output
    assert expected <= set(pipelines), output

    runs = [("bm25",), ("knn",), ("hybrid",), ("rerank",), ("hybrid", "--server-side"), ("rerank", "--server-side"),
            ("hybrid", "--fusion", "minmax", "--alpha", "0.3")]
    for mode, *extra in runs:
        out = _run("query", first["text"], "--opensearch", opensearch_url, "--index", index, "--mode", mode,
                   "--json", "-k", "5", *extra)
        hits = json.loads(out)["hits"]
        ids = [hit["id"] for hit in hits]
        assert len(ids) == 5 and len(set(ids)) == 5, (mode, extra, out)
        assert first["id"] in ids, f"{mode} {extra}: the exact question is not in the top 5: {ids}"
