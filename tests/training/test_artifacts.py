"""hybrid_qpr.artifacts: checkpoints read back with weights_only, the encoder config's
format_version, library versions."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from hybrid_qpr.artifacts import (ENCODER_FORMAT_VERSION, library_versions, load_checkpoint, read_encoder_config,
                                  save_checkpoint, write_encoder_config)
from hybrid_qpr.errors import ArtifactError


def test_checkpoint_round_trip_and_pickled_objects_refused(tmp_path):
    torch = pytest.importorskip("torch")
    state = {"model": {"w": torch.ones(2, 3)}, "epoch": 4, "history": [{"loss": 0.5}], "config": {"seed": 13}}
    save_checkpoint(state, tmp_path / "c.pt")
    back = load_checkpoint(tmp_path / "c.pt", "retrain")
    assert back["epoch"] == 4 and back["history"] == [{"loss": 0.5}] and torch.equal(back["model"]["w"], torch.ones(2, 3))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left behind
    torch.save({"model": Fraction(1, 3)}, tmp_path / "pickled.pt")  # an arbitrary object needs the unpickler
    with pytest.raises(ArtifactError, match="pickled.pt: cannot read the checkpoint.*retrain"):
        load_checkpoint(tmp_path / "pickled.pt", "retrain")
    with pytest.raises(ArtifactError, match="absent.pt: missing; retrain"):
        load_checkpoint(tmp_path / "absent.pt", "retrain")


def test_encoder_config_is_stamped_and_its_version_checked(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"x")
    (tmp_path / "tokenizer.json").write_text("{}")
    written = write_encoder_config(tmp_path, {"kind": "cnn", "dim": 4, "distance": "cosine"})
    assert written["format"] == "hybrid-qpr-encoder" and written["format_version"] == ENCODER_FORMAT_VERSION
    assert read_encoder_config(tmp_path) == written
    (tmp_path / "config.json").write_text(json.dumps({**written, "format_version": 99}))
    with pytest.raises(ArtifactError, match="format_version 99 is not supported"):
        read_encoder_config(tmp_path)


def test_library_versions_leave_out_what_is_absent():
    versions = library_versions(["numpy", "no-such-distribution-hqpr"])
    assert set(versions) == {"numpy"} and versions["numpy"][0].isdigit()


def test_models_record_portable_data_paths(tmp_path, monkeypatch):
    from hybrid_qpr.artifacts import recorded_path

    monkeypatch.chdir(tmp_path)
    assert recorded_path("data/quora") == "data/quora"
    assert recorded_path(tmp_path / "data" / "quora") == "data/quora"
    assert recorded_path("/srv/training-box/data/quora") == "data/quora"


def test_committed_model_files_hold_no_absolute_paths():
    import re
    from pathlib import Path

    for config in (Path(__file__).resolve().parents[2] / "onnx").glob("*/*.json"):
        text = config.read_text(encoding="utf-8")
        assert not re.search(r'"/(home|root|tmp|work|srv|Users)/', text), config
