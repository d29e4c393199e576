"""Asymmetric model directories: question side for queries, answer side for documents; old dirs unchanged."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.distance import similarity
from hybrid_qpr.encoders import Encoder, read_config
from hybrid_qpr.errors import ArtifactError, ConfigError
from hybrid_qpr.export.asymmetric import assemble_asymmetric
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document

TEXTS = ["where is paris?", "paris is the capital of france.", "tea is made from leaves."]


@pytest.fixture(scope="module")
def cnn_encoder():
    """The bundled SDML CNN: its negated copy is a second model of the same kind (an encoder with
    the normalisation inside its graph would give the same order either way)."""
    return Encoder.load("distilled-cnn-quora")


@pytest.fixture(scope="module")
def negated_copy(tmp_path_factory, cnn_encoder):
    """The committed CNN with its projection negated: a second model in the same space whose
    vectors are exactly minus the first one's (so the two sides are told apart)."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    out = tmp_path_factory.mktemp("neg") / "cnn-negated"
    shutil.copytree(cnn_encoder.model_dir, out)
    model = onnx.load(str(out / "model.onnx"))
    for init in model.graph.initializer:
        if init.name.startswith("projection."):
            init.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(init), init.name))
    onnx.save(model, str(out / "model.onnx"))
    return out


def test_sides_encode_with_their_own_model(tmp_path, cnn_encoder, negated_copy):
    model_dir = assemble_asymmetric(tmp_path / "asym", cnn_encoder.model_dir, negated_copy)
    config = read_config(model_dir)
    assert config["format_version"] == 2 and config["sides"] == {"query": "question", "document": "answer"}
    encoder = Encoder.load(model_dir)
    assert encoder.kind == "asymmetric" and not encoder.shared and encoder.dim == cnn_encoder.dim
    plain = cnn_encoder.encode(TEXTS)
    np.testing.assert_allclose(encoder.encode(TEXTS), plain, atol=1e-5)  # default side: query
    np.testing.assert_allclose(encoder.encode(TEXTS, side="document"), -plain, atol=1e-5)
    assert encoder.fingerprint != cnn_encoder.fingerprint
    with pytest.raises(ConfigError, match="side='answer'"):
        encoder.encode(TEXTS, side="answer")  # type: ignore[arg-type]
    # symmetric encoders accept the side and ignore it
    np.testing.assert_allclose(cnn_encoder.encode(TEXTS, side="document"), plain)


def test_ingest_uses_the_answer_side_and_search_the_question_side(tmp_path, cnn_encoder, negated_copy):
    encoder = Encoder.load(assemble_asymmetric(tmp_path / "asym", cnn_encoder.model_dir, negated_copy))
    index = LocalIndex.create(tmp_path / "idx", encoder)
    index.ingest([Document(f"d{i}", t) for i, t in enumerate(TEXTS)], encoder, show_progress=False)
    searcher = HybridSearcher(index, encoder)
    query = "capital of france"
    hits = searcher.search(query, mode="knn", top_k=3)
    scores = similarity(cnn_encoder.encode([query]), -cnn_encoder.encode(TEXTS), encoder.distance)[0]
    assert [h.id for h in hits] == [f"d{i}" for i in np.argsort(-scores)]
    stored = index.vector_scores(cnn_encoder.encode([query])[0], ["d0", "d1", "d2"])
    np.testing.assert_allclose([stored[f"d{i}"] for i in range(3)], scores, rtol=1e-4, atol=1e-4)


def test_shared_weights_make_one_subdirectory(tmp_path, cnn_encoder):
    model_dir = assemble_asymmetric(tmp_path / "shared", cnn_encoder.model_dir)
    assert read_config(model_dir)["sides"] == {"query": "shared", "document": "shared"}
    encoder = Encoder.load(model_dir)
    assert encoder.shared
    np.testing.assert_allclose(encoder.encode(TEXTS, side="document"), encoder.encode(TEXTS))


def test_bad_asymmetric_configs_are_named(tmp_path, cnn_encoder):
    model_dir = assemble_asymmetric(tmp_path / "a", cnn_encoder.model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    for sides, message in (({"query": "shared"}, "needs"), ({"query": "../x", "document": "shared"}, "subdirectory"),
                           ({"query": "nope", "document": "shared"}, "query side's model directory is missing")):
        (model_dir / "config.json").write_text(json.dumps({**config, "sides": sides}))
        with pytest.raises(ArtifactError, match=message):
            Encoder.load(model_dir)
    (model_dir / "config.json").write_text(json.dumps({**config, "format_version": 99}))
    with pytest.raises(ArtifactError, match="format_version 99 is not supported"):
        Encoder.load(model_dir)


def test_version_1_directories_still_load(cnn_encoder):
    config = read_config(cnn_encoder.model_dir)
    assert config.get("format_version", 1) == 1 and Encoder.load(cnn_encoder.model_dir).kind == "cnn"
