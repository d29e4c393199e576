"""Losses by hand: SDML (paper's Figure 2 targets), triplet negatives, MSEM matching and intent
classification terms, the "other" class pooling, and a tiny MSEM training run through train()."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.errors import ConfigError  # noqa: E402
from hybrid_qpr.model.losses import MSEMLoss, intent_classes  # noqa: E402
from hybrid_qpr.testing.corpora import topic_clusters, write_dataset_dir  # noqa: E402


def test_sdml_targets_and_loss_by_hand():
    from hybrid_qpr.model.losses.sdml import SDMLLoss

    loss = SDMLLoss(epsilon=0.3)
    assert torch.allclose(loss.targets(3), torch.tensor([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]))
    a = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    p = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    # squared distances: row0 [1, 1], row1 [2, 0]; targets 0.85 / 0.15
    t = [[0.85, 0.15], [0.15, 0.85]]
    logits = [[-1.0, -1.0], [-2.0, 0.0]]
    expected = 0.0
    for ti, zi in zip(t, logits):
        lse = math.log(sum(math.exp(z) for z in zi))
        expected += sum(tij * (math.log(tij) - (zij - lse)) for tij, zij in zip(ti, zi))
    assert loss(a, p).item() == pytest.approx(expected / 2, rel=1e-5)
    with pytest.raises(ConfigError, match="epsilon=1"):
        SDMLLoss(epsilon=1.0)


def test_triplet_negatives_by_hand():
    from hybrid_qpr.model.losses.triplet import TripletLoss

    # anchor 0 at the origin; positives at distances 1 (own), 0.5, 2, 3 (squared: 1, .25, 4, 9)
    a = torch.zeros(4, 1)
    a[1:, 0] = 100.0  # the other anchors are far away; only row 0 is checked by hand
    p = torch.tensor([[1.0], [0.5], [2.0], [3.0]])
    d = TripletLoss(distance="squared").distances(a, p)
    assert TripletLoss(negatives="hard", distance="squared").pick_negatives(d)[0] == 1
    assert TripletLoss(negatives="semi-hard", distance="squared").pick_negatives(d)[0] == 2
    # no negative farther than the positive: semi-hard falls back to the farthest one
    d2 = torch.tensor([[5.0, 1.0, 2.0], [1.0, 0.0, 3.0], [1.0, 2.0, 0.0]])
    assert TripletLoss(negatives="semi-hard").pick_negatives(d2)[0] == 2
    torch.manual_seed(0)
    picks = TripletLoss(negatives="random").pick_negatives(torch.zeros(5, 5))
    assert all(int(j) != i for i, j in enumerate(picks))
    # loss: row 0 with hard negative: max(0, 1 - 0.25 + 0.5) = 1.25 (squared distances)
    loss = TripletLoss(margin=0.5, distance="squared", negatives="hard")
    rows = loss(a[:1].repeat(2, 1), p[:2])  # two anchors at 0: positives 1 and 0.5
    assert rows.item() == pytest.approx((max(0, 1 - 0.25 + 0.5) + max(0, 0.25 - 1 + 0.5)) / 2)
    with pytest.raises(ConfigError, match="negatives='hardest'"):
        TripletLoss(negatives="hardest")  # type: ignore[arg-type]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _msem_case():
    """N=2, d=2: cos(a_i, p_j) = [[1, 1/√2], [0, 1/√2]]; W = 3×2 by hand (classes 0, 1, other=2)."""
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    loss = MSEMLoss(dim=2, cluster_class=[0, 2], gamma=2.0, alpha=0.5, weight=0.3)  # cluster 1 pooled into "other"
    with torch.no_grad():
        loss.classifier.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
        loss.classifier.bias.zero_()
    return loss, a, p, torch.tensor([0, 1])


def test_msem_matching_term_by_hand():
    loss, a, p, _ = _msem_case()
    r = 1 / math.sqrt(2)
    z = [[2 * (1 - 0.5), 2 * (r - 0.5)], [2 * (0 - 0.5), 2 * (r - 0.5)]]
    positive = (-math.log(_sigmoid(z[0][0])) - math.log(_sigmoid(z[1][1]))) / 2
    negative = (-math.log(1 - _sigmoid(z[0][1])) - math.log(1 - _sigmoid(z[1][0]))) / 2
    assert loss.matching_loss(a, p).item() == pytest.approx(positive + negative, rel=1e-5)


def test_msem_classification_term_and_weight_by_hand():
    loss, a, p, labels = _msem_case()
    e = math.e
    # pair 0 (class 0): W a0 = W p0 = [1, 0, 0]; pair 1 (cluster 1 -> class 2): W a1 = [0, 1, 0], W p1 = [1, 1, 0]
    ce_a = (-math.log(e / (e + 2)) - math.log(1 / (e + 2))) / 2
    ce_p = (-math.log(e / (e + 2)) - math.log(1 / (2 * e + 1))) / 2
    cls = 0.5 * (ce_a + ce_p)
    assert loss.classification_loss(a, p, labels).item() == pytest.approx(cls, rel=1e-5)
    match = loss.matching_loss(a, p).item()
    assert loss(a, p, labels=labels).item() == pytest.approx(match + 0.3 * cls, rel=1e-5)
    loss.weight = 0.0
    assert loss(a, p, labels=labels).item() == pytest.approx(match, rel=1e-6)


def test_msem_other_class_pooling():
    sizes = [2, 7, 5, 1, 9, 5]
    # >= 5 questions: clusters 4 (9), 1 (7), 2 (5), 5 (5); top 2 get classes, the rest is "other" = 2
    assert intent_classes(sizes, min_cluster_size=5, max_classes=2) == [2, 1, 2, 2, 0, 2]
    assert intent_classes(sizes, min_cluster_size=5, max_classes=None) == [4, 1, 2, 4, 0, 3]
    assert MSEMLoss(4, intent_classes(sizes, 5, 2)).classifier.out_features == 3
    with pytest.raises(ConfigError, match="min_cluster_size=0"):
        intent_classes(sizes, min_cluster_size=0)


def test_msem_errors_name_the_problem():
    loss, a, p, _ = _msem_case()
    with pytest.raises(ConfigError, match="needs labels="):
        loss(a, p)
    with pytest.raises(ConfigError, match=r"cluster indices must be in \[0, 2\)"):
        loss(a, p, labels=torch.tensor([0, 5]))
    with pytest.raises(ConfigError, match="weight=-1"):
        MSEMLoss(2, [0, 1], weight=-1)


@pytest.mark.slow
def test_tiny_msem_training_raises_val_mrr_and_trains_the_classifier(tmp_path):
    from hybrid_qpr.model.cnn import CNNModel
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.cnn import TrainConfig, train, validate

    tr, va = topic_clusters(300, 2, varied_sizes=True), topic_clusters(60, 3, varied_sizes=True)
    vocab = Vocabulary.build((q.text for c in tr for q in c.questions), top_words=1000, hash_bins=20)
    torch.manual_seed(0)
    model = CNNModel(vocab, embedding_dim=32, channels=32, dim=32)
    loss_fn = MSEMLoss(32, intent_classes([len(c.questions) for c in tr], min_cluster_size=5, max_classes=50))
    assert loss_fn.num_classes == 51  # 100 clusters of 5 questions, 50 get a class, the rest pooled
    classifier_before = loss_fn.classifier.weight.detach().clone()
    before = validate(model, va, 500, 0, "cosine")["mrr@20"]
    result = train(model, loss_fn, tr, va, tmp_path, TrainConfig(batch_size=32, epochs=12, patience=20, lr=3e-3),
                   show_progress=False)
    assert result.best_val_mrr > before + 0.2, (before, result.history)
    assert not torch.equal(classifier_before, loss_fn.classifier.weight)  # the loss's parameters were optimised


def test_msem_cli_run_exports_cosine_distance_and_data_fingerprint(tmp_path):
    from click.testing import CliRunner

    from hybrid_qpr.cli.export import export
    from hybrid_qpr.cli.train import train as train_cmd
    from hybrid_qpr.encoders import Encoder

    data = write_dataset_dir(tmp_path / "data", {"train": topic_clusters(60, 7, varied_sizes=True),
                                                 "val": topic_clusters(20, 8, varied_sizes=True)}, fingerprint="0123456789abcdef")
    args = [str(data), "--out", str(tmp_path / "run"), "--loss", "msem", "--msem-min-cluster-size", "4",
            "--vocab", "500", "--hash-bins", "10", "--embedding-dim", "8", "--channels", "8", "--dim", "4",
            "--batch-size", "16", "--epochs", "1"]
    done = CliRunner().invoke(train_cmd, args)
    assert done.exit_code == 0, done.output
    meta = json.loads((tmp_path / "run" / "model.json").read_text())
    assert meta["distance"] == "cosine" and meta["data_fingerprint"] == "0123456789abcdef"
    assert meta["loss_options"]["min_cluster_size"] == 4
    done = CliRunner().invoke(export, [str(tmp_path / "run"), "--kind", "cnn", "--out", str(tmp_path / "onnx")])
    assert done.exit_code == 0, done.output
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert config["distance"] == "cosine" and config["training"]["data_fingerprint"] == "0123456789abcdef"
    assert Encoder.load(tmp_path / "onnx").distance == "cosine"
