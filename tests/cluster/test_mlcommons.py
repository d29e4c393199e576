"""ml-commons: the exported MiniLM packaged, registered, deployed and used by the cluster.

The packaging tests need no node. The cluster test registers the untouched MiniLM by chunked
upload, deploys it, checks that the cluster's embeddings equal ``Encoder.load(dir).encode``
(cosine >= 0.99), fills an index through a ``text_embedding`` ingest pipeline and finds
paraphrases with a ``neural`` query.
"""

from __future__ import annotations

import json
import math
import os
import zipfile

import numpy as np
import pytest

from hybrid_qpr import mlcommons
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.mlcommons.calls import ml_request

QUESTIONS = ["how do i reset my password?", "What is the capital of France?", "Ünïcödé çafé: ¿cómo estás?",
             "why " * 100]


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory):
    """The untouched MiniLM exported once per test run with the project's export function."""
    pytest.importorskip("torch")
    from hybrid_qpr.export.transformer import export_transformer_dir

    out = tmp_path_factory.mktemp("minilm") / "model"
    export_transformer_dir(None, out)
    return out


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    from hybrid_qpr.encoders import Encoder

    return Encoder.load(minilm_dir)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.slow
def test_package_matches_encoder_under_ml_commons_pooling(minilm_dir, minilm, tmp_path):
    """Re-enact ml-commons' ONNX translator in Python: one text at a time, first graph output,
    mean over the attention mask, L2 normalisation. It must give hybrid-qpr's embedding."""
    import onnx
    import onnxruntime as ort
    from tokenizers import Tokenizer

    package = mlcommons.package_model(minilm_dir, tmp_path / "pkg" / "minilm.zip")
    with zipfile.ZipFile(package.path) as archive:
        assert sorted(archive.namelist()) == ["model.onnx", "tokenizer.json"]
        archive.extractall(tmp_path / "x")
    assert package.size == package.path.stat().st_size
    assert package.model_config["embedding_dimension"] == 384 and package.model_config["pooling_mode"] == "mean"
    assert package.model_config["model_type"] not in ("bert", "albert")  # no token_type_ids input in the graph
    graph = onnx.load(str(tmp_path / "x" / "model.onnx"))
    assert graph.ir_version <= mlcommons.MAX_IR_VERSION

    session = ort.InferenceSession(str(tmp_path / "x" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()][0] == mlcommons.TOKEN_OUTPUT
    tokenizer = Tokenizer.from_file(str(tmp_path / "x" / "tokenizer.json"))
    pooled = []
    for text in QUESTIONS:
        enc = tokenizer.encode(text)
        ids, mask = np.array([enc.ids]), np.array([enc.attention_mask])
        tokens = session.run(None, {"input_ids": ids, "attention_mask": mask})[0][0]
        weights = mask[0][:, None].astype(np.float32)
        vector = (tokens * weights).sum(0) / max(weights.sum(), 1e-9)
        pooled.append(vector / np.linalg.norm(vector))
    expected = minilm.encode(QUESTIONS)
    assert np.abs(np.asarray(pooled) - expected).max() < 1e-5


@pytest.fixture()
def cnn_dir(tmp_path):
    """A directory whose config.json says kind "cnn" (packaging must refuse it before reading the graph)."""
    model = tmp_path / "cnn"
    model.mkdir()
    (model / "model.onnx").write_bytes(b"x")
    (model / "tokenizer.json").write_text("{}")
    (model / "config.json").write_text(json.dumps({"format": "hybrid-qpr-encoder", "format_version": 1,
                                                   "kind": "cnn", "dim": 8, "distance": "cosine"}))
    return model


def test_package_refuses_a_cnn(cnn_dir, tmp_path):
    with pytest.raises(ConfigError, match="kind 'cnn'"):
        mlcommons.package_model(cnn_dir, tmp_path / "out.zip")
    assert not (tmp_path / "out.zip").exists()


def test_bodies():
    assert mlcommons.neural_query("m1", "how?", 5) == {
        "neural": {"embedding": {"query_text": "how?", "model_id": "m1", "k": 5}}}
    body = mlcommons.ingest_pipeline_body("m1")
    assert body["processors"] == [{"text_embedding": {"model_id": "m1", "field_map": {"text": "embedding"}}}]
    with pytest.raises(ConfigError):
        mlcommons.neural_query("m1", "how?", 0)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.engines("opensearch")
def test_cluster_embeds_like_hybrid_qpr_and_neural_query_finds_paraphrases(
        cluster_client, cluster_backend, minilm_dir, minilm, question_bank, held_out_queries):
    from opensearchpy import helpers

    from hybrid_qpr.testing.mlcommons import fresh_test_model_name, remove_leftover_test_models

    client, backend, index_name = cluster_client, cluster_backend, cluster_backend.index
    # what interrupted runs left deployed holds memory ml-commons' circuit breaker counts
    for leftover in remove_leftover_test_models(client):
        with pytest.raises(ClusterError, match="404"):
            mlcommons.status(client, leftover)
    name = fresh_test_model_name("minilm")
    pipeline = f"{name}-embed"
    model_id = mlcommons.register_dir(client, minilm_dir, name, allow_local_upload=True)
    try:
        record = mlcommons.status(client, model_id)
        assert record["model_state"] == "REGISTERED" and record["model_format"] == "ONNX"
        size = record["model_content_size_in_bytes"]
        assert record["total_chunks"] == math.ceil(size / mlcommons.CHUNK_SIZE)
        try:
            mlcommons.deploy(client, model_id, timeout=180)
        except ClusterError as exc:
            if "publish.djl.ai" in str(exc) and not os.environ.get("CI"):
                pytest.skip(f"this node was started without DJL's PyTorch libraries (restart it with "
                            f"'hybrid-qpr node stop && hybrid-qpr node start'): {exc}")
            raise
        assert mlcommons.status(client, model_id)["model_state"] == "DEPLOYED"

        # 1. the cluster's embedding of a question is hybrid-qpr's
        in_cluster = mlcommons.embed(client, model_id, QUESTIONS)
        assert in_cluster.shape == (len(QUESTIONS), 384)
        assert _cosines(in_cluster, minilm.encode(QUESTIONS)).min() >= 0.99

        # 2. ingest pipeline fills the knn_vector of hybrid-qpr's index layout
        backend.ensure_index(minilm)
        mlcommons.put_ingest_pipeline(client, pipeline, model_id)
        actions = ({"_index": index_name, "_id": d.id, "_source": {"text": d.text, "metadata": d.metadata}}
                   for d in question_bank)
        ok, errors = helpers.bulk(client, actions, pipeline=pipeline, refresh=True, raise_on_error=False)
        assert ok == len(question_bank) and not errors
        stored = client.get(index=index_name, id=question_bank[0].id)["_source"]["embedding"]
        assert _cosines(np.asarray([stored]), minilm.encode([question_bank[0].text]))[0] >= 0.99

        # 3. neural query: the cluster embeds the question and finds its paraphrases
        topic = {d.id: d.metadata["topic"] for d in question_bank}
        right, agree = 0, []
        for query in held_out_queries:
            body = {"size": 10, "query": mlcommons.neural_query(model_id, query, 10), "_source": False}
            # retrying, as a deploy does: the cluster's embedding meets ml-commons' memory circuit breaker
            hits = [h["_id"] for h in ml_request(client, "POST", f"/{index_name}/_search", body)["hits"]["hits"]]
            right += topic[hits[0]] in query
            client_side = [h.id for h in backend.knn(minilm.encode([query])[0], 10)]
            agree.append(len(set(hits) & set(client_side)) / 10)
        assert right >= 0.8 * len(held_out_queries), f"top hit on topic for only {right}/{len(held_out_queries)}"
        assert np.mean(agree) >= 0.95
    finally:
        client.ingest.delete_pipeline(id=pipeline, ignore=[404])
        mlcommons.delete(client, model_id, with_group=True)
        with pytest.raises(ClusterError, match="404"):
            mlcommons.status(client, model_id)


def test_djl_cache_layout_and_classifier_dependency(tmp_path):
    """The names DJL 0.31.1 looks for, and the Maven coordinates with a classifier."""
    from hybrid_qpr.localnode.maven import _dependency
    from hybrid_qpr.localnode.djl import cache_dir

    assert cache_dir(tmp_path) == tmp_path / "data" / "ml_cache" / "pytorch" / "2.4.0-cpu-precxx11-linux-x86_64"
    xml = _dependency("ai.djl.pytorch", "pytorch-native-cpu-precxx11", "2.4.0", classifier="linux-x86_64")
    assert "<classifier>linux-x86_64</classifier>" in xml and "<version>2.4.0</version>" in xml
    assert "<classifier>" not in _dependency("org.opensearch.plugin", "lang-painless", "2.19.6")


@pytest.mark.cluster
def test_cli_errors_are_one_line(opensearch_url, cnn_dir):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["mlcommons", "status", "no-such-model", "--opensearch", opensearch_url])
    assert result.exit_code == 1 and "Failed to find model" in result.output and "Traceback" not in result.output

    result = runner.invoke(cli, ["mlcommons", "register", str(cnn_dir), "--opensearch", opensearch_url])
    assert result.exit_code == 1 and "needs a transformer encoder" in result.output
