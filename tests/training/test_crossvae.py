"""Cross-VAE: each loss term on tiny hand-checked cases, the crossing, and a tiny run that lowers every loss."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.model.crossvae import CrossVAE, LatentDecoder, gaussian_kl, matching_loss, reparameterize  # noqa: E402
from hybrid_qpr.training.crossvae import CrossVAESettings, fit, kl_weight  # noqa: E402


def test_gaussian_kl_by_hand():
    mu = torch.tensor([[1.0, 0.0]])
    logvar = torch.tensor([[0.0, math.log(2.0)]])
    # ½[(1 + 1 − 1 − 0) + (0 + 2 − 1 − log 2)] = ½(2 − log 2)
    assert gaussian_kl(mu, logvar).item() == pytest.approx(0.5 * (2 - math.log(2)))
    assert gaussian_kl(torch.zeros(3, 4), torch.zeros(3, 4)).tolist() == [0.0, 0.0, 0.0]  # the prior itself


def test_reparameterize_uses_sigma():
    z = reparameterize(torch.tensor([[1.0]]), torch.tensor([[math.log(4.0)]]), noise=torch.tensor([[0.5]]))
    assert z.item() == pytest.approx(1.0 + 2.0 * 0.5)


def test_matching_loss_by_hand():
    zq = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    za = torch.tensor([[3.0, 0.0], [0.0, 1.0]])  # cos = identity matrix
    loss = matching_loss(zq, za, torch.tensor(1.0), torch.tensor(0.0))
    # positives: −log σ(1) each; negatives: −log(1 − σ(0)) = log 2 each
    assert loss.item() == pytest.approx(math.log1p(math.exp(-1.0)) + math.log(2.0), abs=1e-6)


def test_decoder_nll_by_hand():
    vocab = 5  # ids 1..4 words, 0 padding; id 5 = begin/end marker
    decoder = LatentDecoder(vocab + 1, latent=3, embedding=4, hidden=4, bos_id=vocab)
    with torch.no_grad():
        decoder.out.weight.zero_()
        decoder.out.bias.zero_()  # uniform over the 6 outputs whatever z is
    tokens = torch.tensor([[2, 3, 0], [4, 0, 0]])
    nll = decoder.nll(torch.randn(2, 3), tokens)
    # 2 words + end marker = 3 steps, and 1 word + end = 2 steps, each costing log 6
    assert nll.tolist() == pytest.approx([3 * math.log(6), 2 * math.log(6)])


def test_decoders_are_crossed():
    torch.manual_seed(0)
    model = CrossVAE(feature_dim=6, vocab_size=9, latent=4, hidden=8, embedding=4, decoder_hidden=8)
    qf, af = torch.randn(3, 6), torch.randn(3, 6)
    qt, at = torch.randint(1, 9, (3, 4)), torch.randint(1, 9, (3, 5))
    zero = (torch.zeros(3, 4), torch.zeros(3, 4))  # z = μ: the terms are deterministic
    terms = model.loss_terms(qf, af, qt, at, noise=zero)
    mu_q, mu_a = model.question_head(qf)[0], model.answer_head(af)[0]
    assert terms.rec_q.item() == pytest.approx(model.question_decoder.nll(mu_a, qt).mean().item())  # q from z_a
    assert terms.rec_a.item() == pytest.approx(model.answer_decoder.nll(mu_q, at).mean().item())  # a from z_q
    assert terms.rec_q.item() != pytest.approx(model.question_decoder.nll(mu_q, qt).mean().item())
    total = terms.total(beta=0.5, lam=2.0)
    expected = terms.rec_q + terms.rec_a + 0.5 * (terms.kl_q + terms.kl_a) + 2.0 * terms.match
    assert total.item() == pytest.approx(expected.item())


def _toy(n=16, features=12, vocab=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    qf = torch.randn(n, features, generator=g)
    # aligned answers are a fixed rotation of their questions: related, but not aligned by the
    # shared initial heads, so the matching term has something to learn
    rotation = torch.linalg.qr(torch.randn(features, features, generator=g))[0]
    af = qf @ rotation + 0.05 * torch.randn(n, features, generator=g)
    qt = torch.randint(1, vocab, (n, 6), generator=g)
    qt[:, 4:] = 0
    at = torch.randint(1, vocab, (n, 8), generator=g)
    return qf.numpy(), af.numpy(), qt.numpy(), at.numpy()


@pytest.fixture()
def one_thread():
    """Tiny models train far faster on one thread than on two contended ones."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_tiny_training_run_lowers_every_loss(tmp_path, one_thread):
    torch.manual_seed(0)
    arrays = _toy()
    model = CrossVAE(12, 30, latent=8, hidden=16, embedding=8, decoder_hidden=16)
    tensors = [torch.as_tensor(x) for x in arrays]

    def terms() -> dict[str, float]:  # every term on all 16 pairs, with the same noise draw before and after
        g = torch.Generator().manual_seed(7)
        noise = (torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g))
        with torch.no_grad():
            return model.loss_terms(*tensors, noise=noise).as_floats()

    before = terms()
    # beta and lam above 1 keep the KL and matching terms from being traded away for reconstruction
    settings = CrossVAESettings(latent=8, batch_size=16, epochs=50, lr=3e-2, beta=3.0, lam=3.0, kl_warmup=0, patience=1000)
    fit(model, *arrays, settings, run_dir=tmp_path)
    after = terms()
    for term in ("rec_q", "rec_a", "kl_q", "kl_a", "match"):
        assert after[term] < before[term], (term, before[term], after[term])
    assert (tmp_path / "checkpoint.pt").is_file() and len((tmp_path / "log.jsonl").read_text().splitlines()) == 50


def test_fit_keeps_the_best_epoch_and_stops_on_patience(one_thread):
    qf, af, qt, at = _toy(n=8)
    model = CrossVAE(12, 30, latent=4, hidden=8, embedding=4, decoder_hidden=8)
    scores = iter([0.1, 0.05, 0.5, 0.4, 0.3, 0.2, 0.9])  # the first is the untrained state (epoch 0)
    result = fit(model, qf, af, qt, at, CrossVAESettings(batch_size=8, epochs=6, patience=2), validate=lambda m: next(scores))
    assert result["best_epoch"] == 2 and result["best_val"] == 0.5 and result["stopped"] == "patience"
    assert [row["epoch"] for row in result["history"]] == [0, 1, 2, 3, 4]


def test_fit_keeps_the_untrained_state_when_no_epoch_beats_it(one_thread):
    qf, af, qt, at = _toy(n=8)
    model = CrossVAE(12, 30, latent=4, hidden=8, embedding=4, decoder_hidden=8)
    untrained = {k: v.clone() for k, v in model.state_dict().items()}
    scores = iter([0.6, 0.5, 0.4])
    result = fit(model, qf, af, qt, at, CrossVAESettings(batch_size=8, epochs=2, patience=5), validate=lambda m: next(scores))
    assert result["best_epoch"] == 0 and result["best_val"] == 0.6
    assert all(torch.equal(v, untrained[k]) for k, v in model.state_dict().items())


def test_untrained_sides_share_weights_and_keep_the_feature_geometry():
    """Both heads start equal (as the paper's two encoders start from one pretrained BERT) and,
    with a latent as wide as the features, an untrained head only rotates them: cosines are kept."""
    torch.manual_seed(0)
    model = CrossVAE(feature_dim=6, vocab_size=9, latent=6, hidden=8, embedding=4, decoder_hidden=8)
    x = torch.randn(5, 6)
    mu_q, mu_a = model.means(x, "query"), model.means(x, "document")
    assert torch.allclose(mu_q, mu_a)
    cos = torch.nn.functional.cosine_similarity
    assert torch.allclose(cos(mu_q[:, None], mu_q[None], dim=-1), cos(x[:, None], x[None], dim=-1), atol=1e-5)


def test_kl_annealing():
    assert [kl_weight(s, 2.0, 4) for s in (0, 2, 4, 10)] == [0.0, 1.0, 2.0, 2.0]
    assert kl_weight(0, 1.0, 0) == 1.0


def test_matching_on_means_ignores_the_noise():
    torch.manual_seed(0)
    model = CrossVAE(feature_dim=6, vocab_size=9, latent=4, hidden=8, embedding=4, decoder_hidden=8)
    qf, af = torch.randn(3, 6), torch.randn(3, 6)
    qt, at = torch.randint(1, 9, (3, 4)), torch.randint(1, 9, (3, 5))
    noise = (torch.randn(3, 4), torch.randn(3, 4))
    mu_q, mu_a = model.question_head(qf)[0], model.answer_head(af)[0]
    at_means = matching_loss(mu_q, mu_a, model.match_weight.abs(), model.match_bias).item()
    assert model.loss_terms(qf, af, qt, at, noise=noise, match_on_means=True).match.item() == pytest.approx(at_means)
    assert model.loss_terms(qf, af, qt, at, noise=noise).match.item() != pytest.approx(at_means)


def test_fit_resumes_from_its_checkpoint_and_may_train_longer(tmp_path, one_thread):
    import dataclasses

    from hybrid_qpr.errors import ConfigError

    arrays = _toy(n=8)
    settings = CrossVAESettings(latent=4, hidden=8, embedding=4, decoder_hidden=8, batch_size=8, epochs=2)
    first = fit(CrossVAE(12, 30, latent=4, hidden=8, embedding=4, decoder_hidden=8), *arrays, settings, run_dir=tmp_path)
    longer = dataclasses.replace(settings, epochs=4, max_minutes=5.0)  # budget settings may change
    resumed = fit(CrossVAE(12, 30, latent=4, hidden=8, embedding=4, decoder_hidden=8), *arrays, longer, run_dir=tmp_path)
    assert [r["epoch"] for r in resumed["history"]] == [1, 2, 3, 4] and resumed["history"][:2] == first["history"]
    with pytest.raises(ConfigError, match="other settings"):
        fit(CrossVAE(12, 30, latent=4, hidden=8, embedding=4, decoder_hidden=8), *arrays,
            dataclasses.replace(longer, lr=1e-2), run_dir=tmp_path)


def test_softmax_matching_loss_and_extra_negatives_by_hand():
    zq = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    za = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # row 2: a hard negative, a copy of answer 0
    loss = matching_loss(zq, za, torch.tensor(2.0), torch.tensor(0.0), "softmax")
    # row 0: candidates cos (1, 0, 1) -> −log(e²/(2e² + 1)); row 1: cos (0, 1, 0) -> −log(e²/(e² + 2))
    e2 = math.exp(2.0)
    expected = 0.5 * (-math.log(e2 / (2 * e2 + 1)) - math.log(e2 / (e2 + 2)))
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    bce = matching_loss(zq, za, torch.tensor(1.0), torch.tensor(0.0), "bce")  # 2 positives, 4 negatives
    # negatives: cos 0 at (0,1), (1,0), (1,2) and 1 at (0,2), the copy
    pos, neg = math.log1p(math.exp(-1.0)), (3 * math.log(2.0) + math.log1p(math.exp(1.0))) / 4
    assert bce.item() == pytest.approx(pos + neg, abs=1e-6)


def _match_accuracy_after(settings: CrossVAESettings) -> tuple[float, float]:
    """Mean matching accuracy (top-1 among the batch) of the first and the last epoch on a toy set
    whose answers are a rotation of their questions, with latent noise as wide as a prior's."""
    torch.manual_seed(0)
    qf, af, qt, at = _toy(n=32)
    arrays = 0.3 * qf, 0.3 * af, qt, at  # |μ| ≈ 1 against noise of norm ≈ 3.5: SQuAD's 5 against 20, scaled down
    model = CrossVAE(12, 30, latent=12, hidden=16, embedding=8, decoder_hidden=16, match_scale=settings.match_scale)
    with torch.no_grad():  # σ = 1 per dimension (the prior's), as the KL term keeps it in real runs
        for head in (model.question_head, model.answer_head):
            head.logvar.weight.zero_()
            head.logvar.bias.zero_()
    history = fit(model, *arrays, settings, show_progress=False)["history"]
    return history[0]["match_accuracy"], history[-1]["match_accuracy"]


def test_matching_term_learns_at_the_means_and_stays_near_chance_on_noisy_samples(one_thread):
    """The fix pinned: the matching term scored at the means (softmax over the batch) rises far
    above chance (1/32) in ten epochs; scored on samples whose noise swamps the means (the
    paper's reading with σ ≈ 1, |μ| small; the KL term keeps them so) it stays low."""
    base = CrossVAESettings(latent=12, batch_size=32, epochs=10, lr=3e-2, kl_warmup=0, beta=1.0, lam=5.0, patience=1000)
    first, last = _match_accuracy_after(base)
    assert last > 0.8 and last > first + 0.3, (first, last)
    noisy_first, noisy_last = _match_accuracy_after(dataclasses.replace(base, match_on_means=False))
    assert noisy_last < 0.2, (noisy_first, noisy_last)  # chance: 1/32


def test_fit_draws_hard_negatives_as_extra_candidates(one_thread):
    qf, af, qt, at = _toy(n=8)
    wrong = af[::-1].copy()  # one wrong answer per pair: another pair's answer
    negatives = [[i] for i in range(8)]
    model = CrossVAE(12, 30, latent=4, hidden=8, embedding=4, decoder_hidden=8)
    settings = CrossVAESettings(latent=4, hidden=8, embedding=4, decoder_hidden=8, batch_size=8, epochs=1, hard_negatives=1)
    seen = []
    original = model.loss_terms

    def spy(*args, **kwargs):
        seen.append(kwargs["negative_features"])
        return original(*args, **kwargs)

    model.loss_terms = spy
    fit(model, qf, af, qt, at, settings, negative_features=wrong, negatives=negatives, show_progress=False)
    assert len(seen) == 1 and seen[0].shape == (8, 12)
    assert sorted(map(tuple, seen[0].tolist())) == sorted(map(tuple, torch.as_tensor(wrong).tolist()))
