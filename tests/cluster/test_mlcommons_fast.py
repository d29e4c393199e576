"""The default (fast) model inside OpenSearch: registered, deployed, used for ingest and query.

One cluster test, on the real node, with the bundled fast model:
1. ``mlcommons.setup`` registers and deploys it, makes the ingest and search pipelines and the
   search template; run again, it reuses the model (no second upload);
2. the cluster's vectors equal the client's (cosine >= 0.9999) on awkward texts: empty, very
   long, non-ASCII;
3. an index filled through the ingest pipeline (plain ``{"text": ...}`` documents) and one
   filled by ``hybrid-qpr ingest`` return the same hits to ``hybrid-qpr query --opensearch``;
4. a request that sends only the question (the stored template, the index's default search
   pipeline) returns the tuned hybrid: the hits of the client's server-side hybrid with the
   same fusion (the same scores rank by rank; hits with exactly tied scores may come in
   another order).
Everything made is deleted afterwards (the node is shared).
"""

from __future__ import annotations

import json
import os
import uuid

import numpy as np
import pytest

from hybrid_qpr import resources
from hybrid_qpr import mlcommons
from hybrid_qpr.errors import ClusterError

AWKWARD = ["", "?", "how do i reset my password?", "Ünïcödé çafé: ¿cómo estás? 東京はどこですか Привет мир",
           "why " * 300, "   leading and trailing spaces   "]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _hits(runner, cli, index: str, url: str, query: str, mode: str) -> list[str]:
    result = runner.invoke(cli, ["query", query, "--index", index, "--opensearch", url, "--mode", mode, "--json",
                                 "-k", "10"])
    assert result.exit_code == 0, result.output
    return [hit["id"] for hit in json.loads(result.output)["hits"]]


def _tidy(client, index: str) -> None:
    client.indices.delete(index=index, ignore=[404])
    for path in (f"/_search/pipeline/{index}-hybrid", f"/_ingest/pipeline/{index}-embed", f"/_scripts/{index}-hybrid"):
        try:
            client.transport.perform_request("DELETE", path)
        except Exception:  # noqa: BLE001 - missing already
            pass


@pytest.mark.cluster
@pytest.mark.slow
def test_fast_model_runs_inside_opensearch(opensearch_url, question_bank, held_out_queries, tmp_path):
    from click.testing import CliRunner
    from opensearchpy import helpers

    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect
    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.encoders import Encoder

    client = connect(opensearch_url)
    fast_dir = resources.resolve_model("fast")
    encoder = Encoder.load(fast_dir)
    tag = uuid.uuid4().hex[:8]
    in_cluster, by_client, name = f"hqpr-fast-pipe-{tag}", f"hqpr-fast-client-{tag}", f"hqpr-test-fast-{tag}"
    model_id = None
    try:
        try:
            done = mlcommons.setup(client, fast_dir, in_cluster, name=name, allow_local_upload=True, deploy_timeout=180)
        except ClusterError as exc:
            if "publish.djl.ai" in str(exc) and not os.environ.get("CI"):
                pytest.skip(f"this node was started without DJL's PyTorch libraries: {exc}")
            raise
        model_id = done.model_id
        assert not done.reused_model and mlcommons.status(client, model_id)["model_state"] == "DEPLOYED"
        again = mlcommons.setup(client, fast_dir, in_cluster, name=name)
        assert again.reused_model and again.model_id == model_id

        # 2. the cluster's vectors are the client's
        vectors = mlcommons.embed(client, model_id, AWKWARD)
        assert vectors.shape == (len(AWKWARD), encoder.dim)
        assert _cosines(vectors, encoder.encode(AWKWARD)).min() >= 0.9999

        # 3. filled by the cluster (plain text documents) vs filled by the client
        actions = ({"_index": in_cluster, "_id": d.id, "_source": {"text": d.text, "metadata": d.metadata}}
                   for d in question_bank)
        ok, errors = helpers.bulk(client, actions, refresh=True, raise_on_error=False)
        assert ok == len(question_bank) and not errors
        stored = client.get(index=in_cluster, id=question_bank[0].id)["_source"]["embedding"]
        assert _cosines(np.asarray([stored]), encoder.encode([question_bank[0].text]))[0] >= 0.9999
        corpus = tmp_path / "bank.jsonl"
        corpus.write_text("".join(json.dumps({"id": d.id, "text": d.text, **d.metadata}) + "\n" for d in question_bank))
        runner = CliRunner()
        # the cluster analyses the documents it fills itself (the legacy word pattern, no stemmer):
        # the client's index is made with the same analysis, so that both rank alike
        result = runner.invoke(cli, ["ingest", str(corpus), "--index", by_client, "--opensearch", opensearch_url,
                                     "--model", "fast", "--language", "legacy"])
        assert result.exit_code == 0, result.output
        for query in held_out_queries:
            for mode in ("knn", "hybrid"):
                assert _hits(runner, cli, in_cluster, opensearch_url, query, mode) == \
                    _hits(runner, cli, by_client, opensearch_url, query, mode), (query, mode)

        # 4. only the question is sent; the cluster embeds it and fuses with the index's fusion
        backend = OpenSearchBackend(client, in_cluster)
        fusion = done.fusion
        for query in held_out_queries[:5]:
            answer = client.transport.perform_request(
                "POST", f"/{in_cluster}/_search/template", body={"id": done.template, "params": {"query_text": query}})
            got = {h["_id"]: h["_score"] for h in answer["hits"]["hits"]}
            expected = {h.id: h.score for h in backend.hybrid_server(
                query, encoder.encode(query)[0], fusion["depth"], fusion=fusion["fusion"], alpha=fusion["alpha"],
                rrf_k=fusion["rrf_k"])[:10]}
            # The same ranking, compared by score: the fast model gives two phrasings with the same
            # words the same vector, and the engine breaks such exact ties its own way. Scores are
            # compared relative to the top hit's (the client halves unweighted RRF scores).
            top_got, top_expected = max(got.values()), max(expected.values())
            assert np.allclose(sorted(v / top_got for v in got.values()),
                               sorted(v / top_expected for v in expected.values()), atol=1e-3), query
            for doc in set(got) & set(expected):
                assert got[doc] / top_got == pytest.approx(expected[doc] / top_expected, abs=1e-3), (query, doc)
    finally:
        _tidy(client, in_cluster)
        client.indices.delete(index=by_client, ignore=[404])
        if model_id is not None:
            mlcommons.delete(client, model_id, with_group=True)
