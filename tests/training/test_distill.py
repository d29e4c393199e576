"""Distillation: the in-batch KL loss by hand, the teacher cache (resumes after a kill, keyed by
corpus and teacher), neighbour batches, and a tiny distil run that lowers its loss and exports."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.errors import ConfigError  # noqa: E402
from hybrid_qpr.testing.corpora import topic_clusters  # noqa: E402


def test_distillation_loss_by_hand():
    from hybrid_qpr.model.losses.distillation import InBatchDistillationLoss

    # teacher: q0 and q1 close (cos 0.8), q2 orthogonal to q0 (cos 0) and cos 0.6 to q1
    teacher = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    # student on a line: q0 at 0, q1 at 1, q2 at 3 -> squared distances 1, 9, 4
    student = torch.tensor([[0.0], [1.0], [3.0]])
    tau = 0.5
    cos = [[None, 0.8, 0.0], [0.8, None, 0.6], [0.0, 0.6, None]]
    sq = [[None, 1.0, 9.0], [1.0, None, 4.0], [9.0, 4.0, None]]
    expected = 0.0
    for i in range(3):
        others = [j for j in range(3) if j != i]
        zt = sum(math.exp(cos[i][j] / tau) for j in others)
        zs = sum(math.exp(-sq[i][j]) for j in others)
        for j in others:
            p = math.exp(cos[i][j] / tau) / zt
            q = math.exp(-sq[i][j]) / zs
            expected += p * (math.log(p) - math.log(q))
    loss = InBatchDistillationLoss(teacher_temperature=tau)
    assert loss(student, teacher).item() == pytest.approx(expected / 3, rel=1e-5)
    p = loss.targets(teacher)
    assert torch.all(p.diagonal() == 0) and torch.allclose(p.sum(1), torch.ones(3))
    # gradients reach the student
    s = torch.tensor([[0.0], [1.0], [3.0]], requires_grad=True)
    loss(s, teacher).backward()
    assert s.grad is not None and torch.isfinite(s.grad).all()
    with pytest.raises(ConfigError, match="temperatures"):
        InBatchDistillationLoss(teacher_temperature=0)


class _Counting:
    """A real ONNX encoder that counts the texts it encodes and can die after some calls (a killed run)."""

    def __init__(self, encoder, die_after: int | None = None):
        self.encoder, self.die_after, self.calls, self.texts = encoder, die_after, 0, 0
        self.fingerprint, self.dim = encoder.fingerprint, encoder.dim

    def encode(self, texts, batch_size=256):
        if self.die_after is not None and self.calls >= self.die_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.texts += len(texts)
        return self.encoder.encode(texts, batch_size=batch_size)


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    """A small random CNN exported to ONNX: a real encoder directory to distil from."""
    from hybrid_qpr.export.onnx import export_cnn
    from hybrid_qpr.model.cnn import CNNModel
    from hybrid_qpr.text.tokenizer import Vocabulary

    texts = [q.text for c in topic_clusters(80, 3) for q in c.questions]
    torch.manual_seed(1)
    model = CNNModel(Vocabulary.build(texts, top_words=500, hash_bins=10), embedding_dim=16, channels=24, dim=12)
    return export_cnn(model, tmp_path_factory.mktemp("teacher") / "teacher")


def test_teacher_cache_resumes_after_a_kill_and_is_keyed(tmp_path, tiny_teacher):
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.training.teacher import teacher_embeddings

    encoder = Encoder.load(tiny_teacher)
    texts = [q.text for c in topic_clusters(50, 5) for q in c.questions]  # 150 texts
    dying = _Counting(encoder, die_after=2)
    with pytest.raises(KeyboardInterrupt):
        teacher_embeddings(dying, texts, tmp_path, chunk=40)
    resumed = _Counting(encoder)
    vectors = teacher_embeddings(resumed, texts, tmp_path, chunk=40)
    assert resumed.texts == len(texts) - 80  # the two finished chunks were kept
    expected = encoder.encode(texts)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert vectors.shape == (150, encoder.dim) and np.allclose(vectors, expected, atol=1e-5)
    again = _Counting(encoder)
    teacher_embeddings(again, texts, tmp_path, chunk=40)
    assert again.texts == 0  # complete: nothing re-embedded
    teacher_embeddings(_Counting(encoder), texts[:-1], tmp_path, chunk=40)  # another corpus
    other_teacher = _Counting(encoder)
    other_teacher.fingerprint = "0" * 16
    teacher_embeddings(other_teacher, texts, tmp_path, chunk=40)
    assert other_teacher.texts == len(texts)  # another teacher never reuses these vectors
    assert len(list(tmp_path.glob("teacher-*.npy"))) == 3


def test_neighbour_groups_cover_every_row_once():
    from hybrid_qpr.training.distill import neighbour_groups, teacher_neighbours

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 5)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    nn = teacher_neighbours(vectors, 6)
    best = int(np.argmax(np.where(np.eye(60, dtype=bool), -np.inf, vectors @ vectors.T)[0]))
    assert nn[0, 0] == best and 0 not in nn[0]
    rows = list(range(50))  # 10 held out
    groups = neighbour_groups(nn, 4, random.Random(1), rows)
    flat = [r for g in groups for r in g]
    assert sorted(flat) == rows and max(len(g) for g in groups) == 4


def _tiny_run(tmp_path, teacher, n_clusters: int, *, batch_size: int, epochs: int, **settings):
    """Distil ``teacher`` into a tiny student on ``n_clusters`` synthetic topics (three questions
    each); returns (corpus file, config, run directory, result)."""
    from hybrid_qpr.training.cnn import TrainConfig
    from hybrid_qpr.training.distill import DistillConfig, distill

    corpus = tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps({"id": q.id, "text": q.text}) + "\n"
                              for c in topic_clusters(n_clusters, 3) for q in c.questions))
    config = DistillConfig(teacher_temperature=0.1, group_size=4, neighbours=8, hash_bins=10,
                           architecture=dict(embedding_dim=16, channels=24, dim=8, layers=1), **settings)
    run = tmp_path / "run"
    result = distill(corpus, teacher, run, config=config, show_progress=False,
                     train_config=TrainConfig(batch_size=batch_size, lr=3e-3, epochs=epochs, patience=10))
    return corpus, config, run, result

def test_tiny_distillation_lowers_the_loss_resumes_and_exports(tmp_path, tiny_teacher):
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.export.onnx import export_run
    from hybrid_qpr.training.cnn import TrainConfig
    from hybrid_qpr.training.distill import distill

    corpus, config, run, result = _tiny_run(tmp_path, tiny_teacher, 80, batch_size=40, epochs=6,
                                            held_out=40, vocab=500, teacher_words=False)
    losses = [h["loss"] for h in result.history]
    assert losses[-1] < 0.8 * losses[0]
    assert result.history[-1]["teacher_recall@10"] > result.history[0]["teacher_recall@10"] - 0.05
    resumed = distill(corpus, tiny_teacher, run, config=config, show_progress=False, resume=True,
                      train_config=TrainConfig(batch_size=40, lr=3e-3, epochs=7, patience=10))
    assert [h["epoch"] for h in resumed.history] == list(range(7))
    meta = json.loads((run / "model.json").read_text())
    assert meta["loss"] == "distill" and meta["distance"] == "sqeuclidean"
    export_run(run, tmp_path / "onnx")
    assert Encoder.load(tmp_path / "onnx").encode(["w1 w2 w3 ?"]).shape == (1, 8)


def test_teacher_words_from_a_wordpiece_tokenizer_or_a_cnn_vocabulary(tmp_path, tiny_teacher):
    from hybrid_qpr.errors import ArtifactError
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.word_init import teacher_words

    vocab = {"[PAD]": 0, "[CLS]": 1, "world": 4, "hello": 2, "##s": 3, "don't": 5, "x1": 6, "Big": 7}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": vocab}}))
    assert teacher_words(tmp_path) == ["hello", "world", "x1"]  # vocabulary order; no pieces, specials, splits or capitals
    assert teacher_words(tiny_teacher) == Vocabulary.load(tiny_teacher / "tokenizer.json").words
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
    with pytest.raises(ArtifactError, match="neither a WordPiece"):
        teacher_words(tmp_path)


def test_word_embeddings_start_from_the_teacher(tiny_teacher):
    """Each word row is the teacher's vector of that word alone on its principal components:
    two words the teacher maps to the same vector get the same row; hash bins stay random."""
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.model.cnn import CNNModel
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.word_init import extend_vocabulary, init_word_embeddings, teacher_word_vectors, teacher_words

    encoder = Encoder.load(tiny_teacher)
    teacher_vocab = teacher_words(tiny_teacher)
    base = Vocabulary(["w1", "zzz-never", "unseenword"], hash_bins=7)
    vocabulary = extend_vocabulary(base, teacher_vocab)
    assert vocabulary.words[:3] == base.words and set(teacher_vocab) <= set(vocabulary.words)
    assert len(vocabulary.words) == len(set(vocabulary.words))
    torch.manual_seed(0)
    model = CNNModel(vocabulary, embedding_dim=6, channels=8, dim=4)
    hash_rows = model.embedding.weight[1 + len(vocabulary.words):].detach().clone()
    assert init_word_embeddings(model, encoder) == len(vocabulary.words)
    rows = model.embedding.weight.detach().numpy()
    expected = teacher_word_vectors(encoder, vocabulary.words, 6)
    assert np.allclose(rows[1:1 + len(vocabulary.words)], expected, atol=1e-5)
    assert np.allclose(expected.std(axis=0), 1.0, atol=1e-3)
    assert torch.equal(model.embedding.weight[1 + len(vocabulary.words):], hash_rows) and not rows[0].any()
    same = teacher_word_vectors(encoder, ["w1", "w1", "w2"], 2)
    assert np.allclose(same[0], same[1])


def test_tiny_distillation_with_teacher_words(tmp_path, tiny_teacher):
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.word_init import teacher_words

    _, _, run, result = _tiny_run(tmp_path, tiny_teacher, 40, batch_size=32, epochs=4, held_out=24, vocab=20,
                                  teacher_words=True)
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    words = Vocabulary.load(run / "tokenizer.json").words
    assert len(words) > 20 and set(teacher_words(tiny_teacher)) <= set(words)
    assert json.loads((run / "model.json").read_text())["loss_options"]["teacher_words"] is True


def _write_answer_set(path, train: list[dict], test: list[dict]):
    """An answer set as 'dataset from-answers' leaves it: manifest + one record per question."""
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": "hybrid-qpr-answers"}))
    for split, records in (("train", train), ("test", test)):
        (path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_corpus_mix_reads_train_texts_of_every_source_once(tmp_path):
    from hybrid_qpr.data.clusters import Cluster, Question
    from hybrid_qpr.errors import InputError
    from hybrid_qpr.testing.corpora import write_dataset_dir
    from hybrid_qpr.training.distill import load_questions

    pairs = write_dataset_dir(tmp_path / "pairs", {
        "train": [Cluster("a", [Question("1", "how to cook rice ?"), Question("2", "cooking rice ?")])],
        "val": [Cluster("b", [Question("3", "a val question ?"), Question("4", "another val question ?")])]}, "f0")
    answers = _write_answer_set(tmp_path / "answers", [
        {"id": "q1", "question": "who wrote emma ?", "positives": ["jane austen wrote it ."],
         "negatives": ["emma is a novel .", "how to cook rice ?"]}],
        [{"id": "q2", "question": "a test question ?", "positives": ["a test sentence ."], "negatives": []}])
    bank = tmp_path / "bank.jsonl"
    bank.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n"
                            for i, t in enumerate(["cooking rice ?", "my own question ?"])))
    mix = load_questions([pairs, answers, bank])
    assert mix == ["how to cook rice ?", "cooking rice ?", "who wrote emma ?", "jane austen wrote it .",
                   "emma is a novel .", "my own question ?"]  # source order, each text once, no val/test text
    assert load_questions(answers) == mix[2:5] + ["how to cook rice ?"]

    many = tmp_path / "many.jsonl"
    texts = [f"question number {i} ?" for i in range(49)] + ["my own question ?"]
    many.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    capped = load_questions([many, bank], max_per_source=10)
    assert capped == load_questions([many, bank], max_per_source=10)  # seeded
    assert len(capped) == len(set(capped)) and capped.count("my own question ?") == 1
    first = capped[:10]
    assert set(first) <= set(texts) and first == sorted(first, key=texts.index)  # a sample, in file order
    assert capped[10:] == [t for t in ["cooking rice ?", "my own question ?"] if t not in first]

    with pytest.raises(InputError, match="needs at least 2"):
        load_questions([tmp_path / "pairs"], max_per_source=1)


def test_distil_a_mix_from_an_exported_model(tmp_path, tiny_teacher):
    """--init takes an exported CNN directory (the default model is one): the student starts from
    its exact weights and vocabulary; CORPUS may be several sources."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.export.onnx import export_run
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.distill import load_start

    _, _, run, _ = _tiny_run(tmp_path, tiny_teacher, 30, batch_size=30, epochs=1, held_out=12, vocab=500,
                             teacher_words=False)
    exported = tmp_path / "exported"
    export_run(run, exported)
    architecture, vocabulary, state = load_start(exported)
    trained = torch.load(run / "best.pt", weights_only=True)["model"]
    assert state.keys() == trained.keys() and all(torch.equal(state[k], trained[k]) for k in state)
    assert vocabulary.words == Vocabulary.load(run / "tokenizer.json").words
    assert {k: architecture[k] for k in ("embedding_dim", "channels", "dim")} == {"embedding_dim": 16, "channels": 24, "dim": 8}

    answers = _write_answer_set(tmp_path / "answers", [
        {"id": f"q{i}", "question": f"w{i} w{i + 1} w{i + 2} ?", "positives": [f"w{i + 3} w{i} sentence ."],
         "negatives": [f"w{i + 5} other sentence ."]} for i in range(30)], [])
    out = tmp_path / "mixed"
    result = CliRunner().invoke(cli, ["distill", str(tmp_path / "questions.jsonl"), str(answers), "--teacher", str(tiny_teacher),
                                      "--out", str(out), "--init", str(exported), "--epochs", "1", "--batch-size", "30",
                                      "--held-out", "24", "--group-size", "4", "--max-per-source", "60"])
    assert result.exit_code == 0, result.output
    options = json.loads((out / "model.json").read_text())["loss_options"]
    assert options["corpus_questions"] == 60 + 60 and options["max_per_source"] == 60
    assert len(options["corpus"]) == 2 and options["init"].endswith("exported")
    bad = CliRunner().invoke(cli, ["distill", str(answers), "--teacher", str(tiny_teacher), "--out", str(tmp_path / "x"),
                                   "--init", str(tmp_path / "answers")])
    assert bad.exit_code != 0 and "neither a train/distill run directory" in bad.output
