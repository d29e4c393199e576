"""Gradient caching gives the plain loss's gradients (tiny model with dropout, built here)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.model.losses import SDMLLoss  # noqa: E402
from hybrid_qpr.training.gradcache import cached_backward  # noqa: E402

TEXTS_A = ["how do i learn python", "what is the capital of france", "why is the sky blue", "how to cook rice",
           "best way to lose weight", "is coffee bad for you", "how do planes fly"]
TEXTS_B = ["how can i learn python fast", "capital city of france", "what makes the sky blue", "rice cooking tips",
           "how can i lose weight", "is drinking coffee unhealthy", "why can planes fly"]


class TinyEncoder(torch.nn.Module):
    """Hashed words -> bag of embeddings -> dropout -> linear: small, but with random masks."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.EmbeddingBag(97, 12, mode="mean")
        self.dropout = torch.nn.Dropout(0.3)
        self.linear = torch.nn.Linear(12, 8)

    def forward(self, texts):
        ids = [torch.tensor([sum(map(ord, w)) % 97 for w in t.split()]) for t in texts]
        offsets = torch.tensor([0] + [len(x) for x in ids[:-1]]).cumsum(0)
        return self.linear(self.dropout(self.embedding(torch.cat(ids), offsets)))


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def _plain_in_chunk_order(model, texts, chunk_size):
    """The plain forward with dropout masks drawn in the order cached_backward draws them
    (chunks of the texts sorted by length), rows back in the texts' order."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    rows = {}
    for start in range(0, len(order), chunk_size):
        chunk = order[start : start + chunk_size]
        for i, row in zip(chunk, model([texts[i] for i in chunk])):
            rows[i] = row
    return torch.stack([rows[i] for i in range(len(texts))])


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 100])
def test_cached_backward_equals_plain_backward(chunk_size):
    """No dropout: the plain loss on the whole batch at once, in one graph."""
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    loss_fn = SDMLLoss(0.3, scale=2.0)
    plain_loss = loss_fn(model(TEXTS_A), model(TEXTS_B))
    plain_loss.backward()
    expected = _grads(model)
    model.zero_grad()

    loss = cached_backward(model, (TEXTS_A, TEXTS_B), loss_fn, chunk_size)
    assert loss == pytest.approx(float(plain_loss.detach()), rel=1e-6)
    for got, want in zip(_grads(model), expected):
        assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()
    assert all(g.abs().sum() > 0 for g in expected)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 100])
def test_cached_backward_replays_dropout(chunk_size):
    """With dropout: the same gradients as the plain loss whose forward drew the same masks."""
    torch.manual_seed(0)
    model = TinyEncoder().train()
    loss_fn = SDMLLoss(0.3, scale=2.0)

    torch.manual_seed(1)
    plain_loss = loss_fn(_plain_in_chunk_order(model, TEXTS_A, chunk_size), _plain_in_chunk_order(model, TEXTS_B, chunk_size))
    plain_loss.backward()
    expected = _grads(model)
    model.zero_grad()

    torch.manual_seed(1)
    loss = cached_backward(model, (TEXTS_A, TEXTS_B), loss_fn, chunk_size)
    assert loss == pytest.approx(float(plain_loss.detach()), rel=1e-6)
    for got, want in zip(_grads(model), expected):
        assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()


def test_dropout_masks_are_replayed():
    """Without restoring the random state the second forward would use other masks: the
    gradients would then differ from the plain loss's (this guards the replay)."""
    torch.manual_seed(0)
    model = TinyEncoder().train()
    torch.manual_seed(5)
    first = model(TEXTS_A)
    torch.manual_seed(5)
    assert torch.equal(first, model(TEXTS_A))
    assert not torch.equal(first, model(TEXTS_A))  # masks differ when the state is not replayed


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError, match="chunk_size=0"):
        cached_backward(TinyEncoder(), (TEXTS_A, TEXTS_B), SDMLLoss(0.3), 0)
