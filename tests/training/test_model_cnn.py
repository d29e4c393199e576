"""SDML CNN: pooling ignores padding, one-word and empty questions, tiny training run, ONNX export."""

import json
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.model.cnn import CNNModel  # noqa: E402
from hybrid_qpr.model.losses import SDMLLoss  # noqa: E402
from hybrid_qpr.text.tokenizer import Vocabulary  # noqa: E402
from hybrid_qpr.training.cnn import TrainConfig, epoch_batches, train  # noqa: E402
from hybrid_qpr.testing.corpora import topic_clusters, write_dataset_dir  # noqa: E402


def _model(seed=0):
    torch.manual_seed(seed)
    vocab = Vocabulary.build(["how do i learn python ?", "what is love ?"], top_words=100, hash_bins=50)
    return CNNModel(vocab, embedding_dim=16, channels=12, dim=8).eval()


def test_pooling_ignores_padding_and_handles_one_word_and_empty():
    model = _model()
    with torch.no_grad():
        alone = model(model.collate(["learn python"]))
        padded = model(model.collate(["learn python", "how do i learn python ? " * 5]))[:1]
        assert torch.allclose(alone, padded, atol=1e-6)
        one, empty = model(model.collate(["python", ""]))
        assert torch.isfinite(one).all()
        assert torch.allclose(empty, model.projection.bias)  # empty -> zero pooled vector


def test_batches_never_hold_two_pairs_of_one_cluster():
    clusters = topic_clusters(50, 1)
    owner = {q.text: c.id for c in clusters for q in c.questions}
    for batch in epoch_batches(clusters, 16, random.Random(0)):
        ids = [owner[a] for a, _, _ in batch]
        assert len(ids) == len(set(ids))
        assert all(owner[a] == owner[b] == clusters[k].id for a, b, k in batch)  # k: the pair's cluster index


@pytest.mark.slow
def test_tiny_training_raises_val_mrr_and_resumes(tmp_path):
    tr, va = topic_clusters(300, 2), topic_clusters(60, 3)
    vocab = Vocabulary.build((q.text for c in tr for q in c.questions), top_words=1000, hash_bins=20)
    torch.manual_seed(0)
    model = CNNModel(vocab, embedding_dim=32, channels=32, dim=32)
    from hybrid_qpr.training.cnn import validate

    before = validate(model, va, 500, 0)["mrr@20"]
    result = train(model, SDMLLoss(0.3), tr, va, tmp_path, TrainConfig(batch_size=32, epochs=12, patience=20), show_progress=False)
    assert result.best_val_mrr > before + 0.2, (before, result.history)
    resumed = train(model, SDMLLoss(0.3), tr, va, tmp_path, TrainConfig(batch_size=32, epochs=13, patience=20), resume=True, show_progress=False)
    assert [h["epoch"] for h in resumed.history] == list(range(13))


def test_onnx_parity_and_inference_without_torch(tmp_path):
    from hybrid_qpr.export.onnx import export_cnn, parity

    model = _model(1)
    out = export_cnn(model, tmp_path / "m")
    rng = random.Random(5)
    texts = ["", "python", "naïve café ¿qué? 日本語", "why " * 300] + [
        " ".join(rng.choice(["how", "do", "i", "learn", "python", "?", "zebra", "Ωmega"]) for _ in range(rng.randint(1, 30)))
        for _ in range(300)
    ]
    assert parity(model, out, texts) <= 1e-4
    code = (
        "import sys, json; sys.modules['torch'] = None\n"
        "from hybrid_qpr.encoders import Encoder\n"
        f"v = Encoder.load({str(out)!r}).encode(['hello world ?', ''])\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(json.dumps([list(v.shape), str(v.dtype)]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [[2, 8], "float32"]


def test_train_and_export_cli(tmp_path):
    from click.testing import CliRunner

    from hybrid_qpr.cli.export import export
    from hybrid_qpr.cli.train import train as train_cmd
    from hybrid_qpr.encoders import Encoder

    data = write_dataset_dir(tmp_path / "data", {"train": topic_clusters(100, 7), "val": topic_clusters(30, 8)})
    args = [str(data), "--out", str(tmp_path / "run"), "--vocab", "500", "--hash-bins", "10", "--embedding-dim", "8",
            "--channels", "8", "--dim", "4", "--batch-size", "16", "--epochs", "2"]
    done = CliRunner().invoke(train_cmd, args)
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(export, [str(tmp_path / "run"), "--kind", "cnn", "--out", str(tmp_path / "onnx")])
    assert done.exit_code == 0, done.output
    assert Encoder.load(tmp_path / "onnx").encode(["w1 w2 ?"]).shape == (1, 4)
