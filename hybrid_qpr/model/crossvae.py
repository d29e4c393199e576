"""Crossing variational auto-encoders for answer retrieval (Cross-VAE).

Yu, Wu, Zeng, Tao, Deng & Jiang, "Crossing Variational Autoencoders for Answer Retrieval",
ACL 2020 (arXiv:2005.02557).

A question VAE and an answer VAE, each with its own Gaussian encoder
``q_φ(z_q | q) = N(μ_q, diag σ_q²)`` and ``q_φ(z_a | a) = N(μ_a, diag σ_a²)``. Unlike dual VAEs,
whose decoders rebuild their own input, the decoders are **crossed**: the question decoder
rebuilds the question from the *answer's* latent, ``p_θ(q | z_a)``, and the answer decoder
the answer from the *question's* latent, ``p_θ(a | z_q)``. A matching predictor
``p(y | z_q, z_a)`` aligns the two latent spaces. Answers are retrieved by comparing latent
means. The objective minimised here, per aligned pair (q, a), is

    L = L_rec_q + L_rec_a + β·(L_KL_q + L_KL_a) + λ·L_match                            (this module)

with the terms, as they read in the paper's objective (its crossed ELBO plus the matching
loss; the paper maximises the ELBO, this module minimises its negative):

    L_rec_q  = −E_{z_a ~ q_φ(z_a|a)} [log p_θ(q | z_a)]    question rebuilt from the answer latent
    L_rec_a  = −E_{z_q ~ q_φ(z_q|q)} [log p_θ(a | z_q)]    answer rebuilt from the question latent
    L_KL_q   = KL(q_φ(z_q|q) ‖ N(0, I)) = ½ Σ_d (μ_d² + σ_d² − 1 − log σ_d²)           (Kingma & Welling 2014, app. B)
    L_KL_a   = KL(q_φ(z_a|a) ‖ N(0, I))
    L_match  = −[y log p(y=1|z_q,z_a) + (1−y) log(1 − p(y=1|z_q,z_a))]             binary cross-entropy

Each expectation is estimated with one reparameterised sample ``z = μ + σ ⊙ ε``; ``log p(q|z)``
is the sum of token log-probabilities of a GRU language model whose initial state and
every input step are conditioned on z (Bowman et al. 2016). Matching uses, for each aligned
pair (y = 1), the other answers of the batch as mismatched pairs (y = 0); the positive and
negative halves are averaged separately so the batch size does not tilt them.

What is **not** certain (read from memory of the paper, not checked against its text):

* the exact form of ``p(y | z_q, z_a)``. Here it is ``σ(w·cos(z_q, z_a) + b)`` with learned
  w > 0 and b, chosen so that ranking answers by the cosine of the latent means is exactly
  ranking by the predictor's score at the means, which a vector index can serve;
* the weights: β (KL) and λ (matching) default to 1, with β annealed linearly from 0 over
  the first steps (``kl_warmup``) against posterior collapse, a standard VAE practice the
  paper may or may not use;
* where the matching term is scored. ``p(y | z_q, z_a)`` on one sample of each latent is
  the reading of the paper. With a wide latent the sampled cosine is noise: on SQuAD the
  σ of the untrained heads is the prior's 1 per dimension (the KL term keeps it there), so the
  noise has norm √384 ≈ 19.7 against means of norm 5.4, and an aligned pair's cosine is 0.62
  at the means but 0.036 on samples; the matching gradient reaching the question head is a
  fifth of the reconstruction and KL gradients (1.7 against 7.8). The term then stays at chance
  (measured: 1.377 against 2 ln 2 = 1.386 after 300 steps). ``match_on_means`` (the training
  default now) scores it at the means, which retrieval compares anyway;
* the form of the matching loss. The binary predictor (``"bce"``) learns at the means (train
  accuracy 0.96) yet lowers retrieval MRR (SQuAD val 0.70 -> 0.60): it asks every mismatched
  pair to fall below one threshold, which bends the latent geometry. ``"softmax"`` (the
  default) only asks the aligned answer to outrank the batch's other answers and the
  question's labelled wrong sentences (hard negatives), what ranking needs;
* the encoders: the paper fine-tunes a pretrained (BERT) encoder. Here the encoder is a
  pretrained sentence encoder (MiniLM, mean pooling; frozen unless ``train_encoder``) followed
  by a trainable head per side (``GaussianHead``: μ is a linear map of the features plus a small tanh correction,
  log σ² a tanh layer). Frozen, training fits a CPU (features computed once), but the heads
  alone gain little (SQuAD val MRR +0.006 at best, docs/answers.md). As both of the paper's encoders start from
  the same pretrained weights, both heads start equal, with μ an orthogonal map of the
  features: the untrained model ranks like the pretrained encoder (with latent 384 = the
  MiniLM width, exactly). The decoders are word-level GRUs over the training vocabulary
  (the project's ``Vocabulary`` with one unknown-word bin).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def gaussian_kl(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, diag e^logvar) ‖ N(0, I)) per row: ½ Σ_d (μ_d² + e^logvar_d − 1 − logvar_d)."""
    return 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(-1)


def reparameterize(mu: torch.Tensor, logvar: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
    """``z = μ + σ ⊙ ε`` with ε ~ N(0, I) (or the given ``noise``)."""
    eps = torch.randn_like(mu) if noise is None else noise
    return mu + torch.exp(0.5 * logvar) * eps


MATCH_LOSSES = ("bce", "softmax")


def matching_loss(zq: torch.Tensor, za: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  kind: str = "bce") -> torch.Tensor:
    """The matching loss over ``s_ij = w·cos(z_q_i, z_a_j)``: row i of ``zq`` is aligned with row
    i of ``za`` (y = 1) and mismatched with every other row (y = 0); rows of ``za`` beyond
    ``len(zq)`` are extra mismatched answers (hard negatives).

    * ``"bce"``: binary cross-entropy of ``p(y=1 | z_q, z_a) = σ(s_ij + b)``, mean over the
      positives plus mean over the negatives (the paper's predictor, as read here);
    * ``"softmax"``: cross-entropy of the aligned answer among row i's candidates,
      ``−log softmax_j(s_ij)[i]`` (the in-batch ranking loss of dense retrievers): it only asks
      the aligned answer to outrank the others, which is what retrieval by cosine needs."""
    logits = weight * F.normalize(zq, dim=-1) @ F.normalize(za, dim=-1).T
    n = logits.shape[0]
    if kind == "softmax":
        return F.cross_entropy(logits, torch.arange(n, device=logits.device))
    logits = logits + bias
    eye = torch.zeros_like(logits, dtype=torch.bool)
    eye[torch.arange(n), torch.arange(n)] = True
    positive = F.binary_cross_entropy_with_logits(logits[eye], torch.ones(n, device=logits.device))
    if logits.shape[1] < 2:
        return positive
    negative = F.binary_cross_entropy_with_logits(logits[~eye], torch.zeros(int((~eye).sum()), device=logits.device))
    return positive + negative


@torch.no_grad()
def match_accuracy(zq: torch.Tensor, za: torch.Tensor) -> torch.Tensor:
    """Fraction of rows i whose aligned answer ``za[i]`` has the highest cosine among all rows of
    ``za`` (chance: 1 / len(za)): whether the matching term learns, read off the training log."""
    cos = F.normalize(zq, dim=-1) @ F.normalize(za, dim=-1).T
    return (cos.argmax(1) == torch.arange(len(zq), device=cos.device)).float().mean()


class GaussianHead(nn.Module):
    """Sentence features -> (μ, log σ²) of the latent: the trainable part of one side's encoder.

    ``μ = P·x + W₂·tanh(W₁·x)``: a linear map of the pretrained features (the paper's linear
    layer over its encoder) plus a small non-linear correction that stands in for fine-tuning
    the encoder, which is frozen here. P starts (semi-)orthogonal and the correction at zero, so
    an untrained head keeps the pretrained encoder's geometry (cosines are unchanged when the
    latent is as wide as the features)."""

    def __init__(self, feature_dim: int, hidden: int, latent: int):
        super().__init__()
        self.project = nn.Linear(feature_dim, latent, bias=False)
        nn.init.orthogonal_(self.project.weight)
        self.body = nn.Sequential(nn.Linear(feature_dim, hidden), nn.Tanh())
        self.mu = nn.Linear(hidden, latent)
        nn.init.zeros_(self.mu.weight)
        nn.init.zeros_(self.mu.bias)
        self.logvar = nn.Linear(hidden, latent)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(features)
        return self.project(features) + self.mu(h), self.logvar(h)


class LatentDecoder(nn.Module):
    """GRU language model conditioned on z: ``log p(x | z) = Σ_t log p(x_t | x_<t, z)``."""

    def __init__(self, vocab_size: int, latent: int, embedding: int, hidden: int, bos_id: int):
        super().__init__()
        self.bos_id = bos_id
        self.embed = nn.Embedding(vocab_size, embedding, padding_idx=0)
        self.init = nn.Linear(latent, hidden)
        self.gru = nn.GRU(embedding + latent, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def nll(self, z: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """−log p(tokens | z) per row, summed over the real tokens and the end marker.
        ``tokens`` [N, T] are right-padded with 0; the end marker is ``bos_id`` (one id
        serves as both begin and end of sentence)."""
        n = tokens.shape[0]
        lengths = (tokens > 0).sum(1)
        bos = torch.full((n, 1), self.bos_id, dtype=tokens.dtype, device=tokens.device)
        inputs = torch.cat([bos, tokens], 1)  # BOS w1 .. wT
        targets = torch.cat([tokens, torch.zeros_like(bos)], 1)
        targets[torch.arange(n), lengths] = self.bos_id  # w1 .. wT EOS, then padding
        steps = inputs.shape[1]
        x = torch.cat([self.embed(inputs), z.unsqueeze(1).expand(n, steps, z.shape[-1])], -1)
        h0 = torch.tanh(self.init(z)).unsqueeze(0)
        output, _ = self.gru(x, h0)
        logp = F.log_softmax(self.out(output), -1)
        token_logp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return -(token_logp * (targets > 0)).sum(1)


@dataclass(frozen=True)
class LossTerms:
    rec_q: torch.Tensor  # −log p(q | z_a), mean over the batch
    rec_a: torch.Tensor  # −log p(a | z_q)
    kl_q: torch.Tensor
    kl_a: torch.Tensor
    match: torch.Tensor
    match_accuracy: torch.Tensor  # logged only: top-1 of the aligned answer among the candidates

    def total(self, beta: float, lam: float) -> torch.Tensor:
        """L = L_rec_q + L_rec_a + β·(L_KL_q + L_KL_a) + λ·L_match (module docstring)."""
        return self.rec_q + self.rec_a + beta * (self.kl_q + self.kl_a) + lam * self.match

    def as_floats(self) -> dict[str, float]:
        return {k: float(getattr(self, k).detach()) for k in ("rec_q", "rec_a", "kl_q", "kl_a", "match", "match_accuracy")}


class CrossVAE(nn.Module):
    """The two Gaussian heads, the two crossed decoders and the matching predictor."""

    def __init__(self, feature_dim: int, vocab_size: int, *, latent: int = 128, hidden: int = 256,
                 embedding: int = 128, decoder_hidden: int = 256, match_scale: float = 5.0):
        super().__init__()
        self.question_head = GaussianHead(feature_dim, hidden, latent)
        self.answer_head = GaussianHead(feature_dim, hidden, latent)
        # Both sides start from the same weights, as the paper's two encoders both start from
        # the same pretrained BERT: the two latent spaces begin aligned and the losses refine
        # them. Independent random heads start in unrelated spaces (measured on SQuAD val:
        # MRR 0.002 at initialisation, and 0.14 after 8 epochs, against 0.71 for MiniLM).
        self.answer_head.load_state_dict(self.question_head.state_dict())
        bos = vocab_size  # one extra id for begin/end of sentence
        self.question_decoder = LatentDecoder(vocab_size + 1, latent, embedding, decoder_hidden, bos)
        self.answer_decoder = LatentDecoder(vocab_size + 1, latent, embedding, decoder_hidden, bos)
        self.match_weight = nn.Parameter(torch.tensor(float(match_scale)))  # w of w·cos, learned
        self.match_bias = nn.Parameter(torch.tensor(0.0))

    def loss_terms(self, q_features: torch.Tensor, a_features: torch.Tensor, q_tokens: torch.Tensor,
                   a_tokens: torch.Tensor, noise: tuple[torch.Tensor, torch.Tensor] | None = None, *,
                   match_on_means: bool = False, match_loss: str = "bce",
                   negative_features: torch.Tensor | None = None) -> LossTerms:
        """The five terms for a batch of aligned pairs (row i of each input is pair i).
        ``match_on_means`` scores the matching term at the latent means instead of the samples
        (a deviation, see the module docstring); ``match_loss`` picks its form
        (:func:`matching_loss`); ``negative_features`` are extra mismatched answers for it."""
        mu_q, logvar_q = self.question_head(q_features)
        mu_a, logvar_a = self.answer_head(a_features)
        zq = reparameterize(mu_q, logvar_q, None if noise is None else noise[0])
        za = reparameterize(mu_a, logvar_a, None if noise is None else noise[1])
        mq, ma = (mu_q, mu_a) if match_on_means else (zq, za)
        if negative_features is not None and len(negative_features):
            mu_n, logvar_n = self.answer_head(negative_features)
            ma = torch.cat([ma, mu_n if match_on_means else reparameterize(mu_n, logvar_n)])
        return LossTerms(
            rec_q=self.question_decoder.nll(za, q_tokens).mean(),  # question from the ANSWER latent
            rec_a=self.answer_decoder.nll(zq, a_tokens).mean(),  # answer from the QUESTION latent
            kl_q=gaussian_kl(mu_q, logvar_q).mean(),
            kl_a=gaussian_kl(mu_a, logvar_a).mean(),
            match=matching_loss(mq, ma, self.match_weight.abs(), self.match_bias, match_loss),
            match_accuracy=match_accuracy(mq, ma),
        )

    @torch.no_grad()
    def means(self, features: torch.Tensor, side: str) -> torch.Tensor:
        """Latent means μ of ``side`` ("query" or "document"): what retrieval compares."""
        head = self.question_head if side == "query" else self.answer_head
        return head(features)[0]


def latent_mean_embedder(base, head: GaussianHead):
    """One side of a trained Cross-VAE as a ``TransformerEmbedder``: the pretrained backbone,
    mean pooling, the side's head μ and L2 normalisation (retrieval by the cosine of latent
    means), so ``hybrid_qpr.export.transformer`` exports and parity-checks it like any other."""
    from hybrid_qpr.model.transformer import TransformerEmbedder, mean_pool

    class LatentMeanEmbedder(TransformerEmbedder):
        def __init__(self):
            super().__init__(base.backbone, base.tokenizer_path, max_length=base.max_length, normalize=True,
                             source=f"{base.source} + Cross-VAE head")
            self.head = head
            self.dim = int(head.mu.out_features)

        def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            mu = self.head(mean_pool(hidden, attention_mask))[0]
            return F.normalize(mu, p=2.0, dim=1, eps=1e-12)

    return LatentMeanEmbedder()
