"""ASBERT pieces: the losses with labelled negatives (by hand), batch drawing and the dev MAP."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.data.answer_dataset import AnswerRecord  # noqa: E402
from hybrid_qpr.model.losses.labelled_negatives import (SDMLNegativesLoss, SiameseNegativesLoss,  # noqa: E402
                                                         TripletNegativesLoss)
from hybrid_qpr.model.losses.sdml import SDMLLoss  # noqa: E402
from hybrid_qpr.model.losses.triplet import TripletLoss  # noqa: E402
from hybrid_qpr.training.asbert import AsbertSettings, dev_map, draw_batch  # noqa: E402

A = torch.tensor([[0.0, 0.0], [10.0, 0.0]])  # two questions
P = torch.tensor([[1.0, 0.0], [10.0, 2.0]])  # d²(a0,p0) = 1, d²(a1,p1) = 4; in-batch d²(a0,p1) = 104, d²(a1,p0) = 81
N = torch.tensor([[0.0, 1.5], [9.0, 0.0]])  # labelled wrong: n0 for q0 (d² 2.25), n1 for q1 (d² 1)
OWNER = torch.tensor([0, 1])


def test_triplet_hard_negative_comes_from_the_labelled_candidates():
    loss = TripletNegativesLoss(margin=2.0, negatives="hard")
    # closest candidates: q0 -> n0 (2.25), q1 -> n1 (1): max(0, 1 − 2.25 + 2) = 0.75, max(0, 4 − 1 + 2) = 5
    assert loss(A, P, N, OWNER).item() == pytest.approx((0.75 + 5.0) / 2)
    # without labelled negatives it is the in-batch triplet loss
    assert loss(A, P).item() == pytest.approx(TripletLoss(2.0, "squared", "hard")(A, P).item())


def test_triplet_semi_hard_takes_the_closest_farther_than_the_positive():
    loss = TripletNegativesLoss(margin=2.0, negatives="semi-hard")
    # q0 (positive 1): candidates p1 104, n0 2.25, n1 81 -> closest farther is n0: 1 − 2.25 + 2 = 0.75
    # q1 (positive 4): candidates p0 81, n0 102.25, n1 1 -> closest farther is p0: max(0, 4 − 81 + 2) = 0
    assert loss(A, P, N, OWNER).item() == pytest.approx(0.75 / 2)


def test_sdml_with_negatives_widens_the_softmax():
    loss = SDMLNegativesLoss(epsilon=0.0)
    logits = -torch.tensor([[1.0, 104.0, 2.25, 81.0], [81.0, 4.0, 102.25, 1.0]])
    expected = -(torch.log_softmax(logits, 1)[0, 0] + torch.log_softmax(logits, 1)[1, 1]) / 2
    assert loss(A, P, N, OWNER).item() == pytest.approx(expected.item(), rel=1e-5)
    assert SDMLNegativesLoss(0.3)(A, P).item() == pytest.approx(SDMLLoss(0.3)(A, P).item(), rel=1e-6)


def test_siamese_with_negatives_by_hand():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positives = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    negatives = torch.tensor([[-1.0, 0.0]])
    loss = SiameseNegativesLoss(scale=1.0, threshold=0.0)(anchors, positives, negatives, torch.tensor([0]))
    # positives: cos 1 -> −log σ(1); negatives: cos 0 (two in-batch), cos −1 (q0-n0) and cos 0 (q1-n0)
    pos = math.log1p(math.exp(-1.0))
    neg = (3 * math.log(2.0) + math.log1p(math.exp(-1.0))) / 4
    assert loss.item() == pytest.approx(pos + neg, rel=1e-6)


def _records(n=5):
    return [AnswerRecord(f"q{i}", f"question {i}", f"q{i}", [f"answer {i}"], [f"wrong {i}a", f"wrong {i}b"])
            for i in range(n)]


def test_draw_batch_is_seeded_and_owns_negatives():
    settings = AsbertSettings(batch_size=3, negatives_per_question=2, seed=4)
    first = draw_batch(_records(), settings, step=7)
    assert first == draw_batch(_records(), settings, step=7)
    questions, positives, negatives, owner = first
    assert len(questions) == 3 == len(set(questions)) and len(negatives) == 6
    for neg, row in zip(negatives, owner):
        assert neg.startswith(f"wrong {questions[row].split()[1]}")


class _BagEncoder:
    """Vectors that make 'answer i' closest to 'question i': enough to check the MAP plumbing."""

    normalize = True

    def encode(self, texts):
        out = torch.zeros(len(texts), 8)
        for row, text in enumerate(texts):
            word, index = text.split()[0], int(text.split()[1][0])
            out[row, index] = 1.0 if word in ("question", "answer") else 0.5
            out[row, 7] = 0.1
        return torch.nn.functional.normalize(out, dim=1)


def test_dev_map_ranks_each_question_candidates():
    records = _records(3)
    assert dev_map(_BagEncoder(), records) == pytest.approx(1.0)
    swapped = [AnswerRecord(r.id, r.question, r.group, r.negatives[:1], r.positives + r.negatives[1:]) for r in records]
    # now the right answer (a 'wrong' text) ranks 2nd or 3rd: AP = 1/2 or 1/3
    assert dev_map(_BagEncoder(), swapped) < 0.6


def test_answer_losses_come_from_the_one_registry():
    from hybrid_qpr.model.losses import ANSWER_LOSSES, build_loss as registry_build
    from hybrid_qpr.training.asbert import AsbertSettings, build_loss

    assert ANSWER_LOSSES == ("triplet-negatives", "siamese-negatives", "sdml-negatives")
    assert isinstance(registry_build("triplet-negatives", margin=0.7, negatives="semi-hard"), TripletNegativesLoss)
    assert isinstance(registry_build("sdml-negatives", epsilon=0.1), SDMLNegativesLoss)
    for kind, cls in (("triplet", TripletNegativesLoss), ("siamese", SiameseNegativesLoss), ("sdml", SDMLNegativesLoss)):
        assert type(build_loss(AsbertSettings(loss=kind))) is cls
    triplet = build_loss(AsbertSettings(loss="triplet", margin=0.7, negatives="semi-hard"))
    assert (triplet.margin, triplet.negatives) == (0.7, "semi-hard")


# Questions whose labelled wrong candidates repeat the question's words while the correct
# sentence does not: MiniLM starts below a perfect MAP, and training on them can fix that.
_TINY_TSV = "qid\tquestion\tsentence\tlabel\n" + "".join(
    f"t{i}\t{q}\t{good}\t1\nt{i}\t{q}\t{bad1}\t0\nt{i}\t{q}\t{bad2}\t0\n" for i, (q, good, bad1, bad2) in enumerate([
        ("who painted the mona lisa", "leonardo da vinci made it around 1503 .", "the mona lisa hangs in the louvre .",
         "who painted copies of the mona lisa is unknown ."),
        ("how tall is mount everest", "it rises 8,849 metres above sea level .", "mount everest is in the himalaya .",
         "how tall mount everest looks depends on the weather ."),
        ("when did the titanic sink", "the liner went down in april 1912 .", "the titanic was built in belfast .",
         "when the titanic sank is shown in many films ."),
        ("what is the capital of australia", "canberra hosts the federal government .",
         "australia is the capital of sport , fans say .", "the capital of australia's largest state is sydney ."),
        ("who wrote pride and prejudice", "jane austen published it in 1813 .", "pride and prejudice is a novel .",
         "who wrote the sequels to pride and prejudice varies ."),
        ("how many legs does a spider have", "eight , unlike the six of insects .", "a spider is not an insect .",
         "how many legs a spider has lost does not stop it ."),
    ]))


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["triplet", "siamese", "sdml"])
def test_tiny_asbert_run_lowers_the_loss(tmp_path, loss):
    from hybrid_qpr.data.answer_dataset import build_answer_selection, read_answer_records
    from hybrid_qpr.model.transformer import TransformerEmbedder
    from hybrid_qpr.training.asbert import AsbertSettings, build_loss, draw_batch, train_asbert

    src = tmp_path / "tiny.tsv"
    src.write_text(_TINY_TSV, encoding="utf-8")
    build_answer_selection(src, tmp_path / "train", split_name="train")
    build_answer_selection(src, tmp_path / "dev", split_name="val")
    settings = AsbertSettings(loss=loss, max_length=16, batch_size=6, negatives_per_question=2, steps=6, lr=1e-4,
                              warmup=0.0, eval_every=6, patience=5, seed=1)
    records = [r for r in read_answer_records(tmp_path / "train", "train") if r.positives]
    questions, positives, negatives, owner = draw_batch(records, settings, 0)
    loss_fn = build_loss(settings)

    def held_loss(model) -> float:
        with torch.no_grad():
            v = model.encode(questions + positives + negatives)
            n = len(questions)
            return float(loss_fn(v[:n], v[n:2 * n], v[2 * n:], torch.as_tensor(owner)))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model trains faster on one thread than on two contended ones
    try:
        before = held_loss(TransformerEmbedder.from_dir(max_length=16, normalize=settings.normalized))
        report = train_asbert([tmp_path / "train"], tmp_path / "dev", tmp_path / "run", settings)
        after = held_loss(TransformerEmbedder.from_dir(tmp_path / "run" / "model"))
    finally:
        torch.set_num_threads(threads)
    assert report["best_step"] == 6 and report["best_dev_map"] > report["history"][0]["dev_map"], report["history"]
    assert after < before, (before, after)
