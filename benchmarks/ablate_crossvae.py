"""Cross-VAE ablations (issue 23): why the matching term stayed at chance, one factor at a time.

Each run trains the two heads (and, unless ``rec`` is 0, the crossed decoders) over frozen
MiniLM features (64 tokens) of a seeded sample of SQuAD train pairs and logs, every
``eval_every`` steps, the matching term's loss, its top-1 accuracy among the candidates
(chance 1 / candidates) and SQuAD val MRR (ranking every val-article sentence by the cosine of
latent means). At the first step it also records the latent scales, the aligned pairs' cosine
at the means and on samples, and the gradient norms the matching term and the other terms send
to the question head. The table of docs/answers.md (Cross-VAE section) is :data:`RUNS`.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/ablate_crossvae.py --data data --work WORKDIR [--only A0 B7]

``data`` holds ``squad`` (``hybrid-qpr dataset from-squad``), ``wikiqa`` and ``trecqa``; the
features of every text are computed once into WORKDIR. One JSON line per run on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from hybrid_qpr.data.answer_dataset import read_answer_records
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.model.crossvae import CrossVAE, gaussian_kl, match_accuracy, matching_loss, reparameterize
from hybrid_qpr.text.tokenizer import Vocabulary
from hybrid_qpr.training.crossvae import retrieval_validator, sentence_features, trim_padding

HARD = dict(match_on="means", loss="softmax", rec=0, beta=0)
RUNS = {
    "A0": {},  # the earlier recipe: samples, bce, rec + KL, λ 20, lr 1e-4
    "A3": dict(rec=0, beta=0),
    "A4": dict(match_on="means", rec=0, beta=0),
    "A6": dict(HARD),
    "A7": dict(HARD, hard=3),
    "A7b": dict(HARD, hard=3, lr=1e-3),
    "B1": dict(HARD, hard=3, lr=1e-5, eval_every=50),
    "B2": dict(HARD, hard=3, lr=3e-6, eval_every=50),
    "B3": dict(HARD, hard=3, lr=1e-5, scale=20.0, eval_every=50),
    "B4": dict(HARD, lr=1e-5, scale=20.0, eval_every=50),
    "B5": dict(match_on="means", rec=0, beta=0, lr=1e-5, eval_every=50),
    "B6": dict(rec=0, beta=0, lr=1e-5, eval_every=50),
    "B7": dict(HARD, hard=3, lr=1e-5, scale=20.0, steps=600),
}


def text_features(data: Path, work: Path) -> dict[str, np.ndarray]:
    """MiniLM features (64 tokens, not normalised) of every train, val and test text, cached."""
    from hybrid_qpr.model.transformer import TransformerEmbedder

    texts: set[str] = set()
    for name in ("squad", "wikiqa", "trecqa"):
        for r in read_answer_records(data / name, "train"):
            texts.update([r.question, *r.positives, *r.negatives[:20]])
    for split in ("val", "test"):
        corpus, queries, _ = load_beir(data / "squad" / "beir", split)
        texts.update(corpus.values())
        texts.update(queries.values())
    ordered = sorted(texts)
    embedder = TransformerEmbedder.from_dir(None, max_length=64, normalize=False)
    work.mkdir(parents=True, exist_ok=True)
    features = sentence_features(embedder, ordered, work)
    return dict(zip(ordered, features))


def run(name: str, data: Path, features: dict[str, np.ndarray], *, limit: int = 3000, steps: int = 300,
        batch: int = 64, lr: float = 1e-4, beta: float = 1.0, lam: float = 20.0, rec: float = 1.0,
        match_on: str = "samples", loss: str = "bce", hard: int = 0, scale: float | None = None,
        logvar_bias: float | None = None, eval_every: int = 100, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    lookup = lambda ts: np.stack([features[t] for t in ts])  # noqa: E731
    pairs = [(r.question, p, r.negatives[:20]) for r in read_answer_records(data / "squad", "train") for p in r.positives]
    random.Random(seed).shuffle(pairs)
    pairs = pairs[:limit]
    vocab = Vocabulary.build((t for p in pairs for t in p[:2]), top_words=2000, hash_bins=1, max_length=24)
    qf, af = (torch.as_tensor(lookup([p[i] for p in pairs])) for i in (0, 1))
    qt, at = (torch.as_tensor(vocab.encode_batch([p[i] for p in pairs])) for i in (0, 1))
    model = CrossVAE(qf.shape[1], vocab.size, latent=384, hidden=256, embedding=128, decoder_hidden=128,
                     match_scale=5.0 if scale is None else scale)
    if logvar_bias is not None:  # start with σ = exp(bias / 2) instead of about 1
        for head in (model.question_head, model.answer_head):
            torch.nn.init.zeros_(head.logvar.weight)
            torch.nn.init.constant_(head.logvar.bias, logvar_bias)
    validate = retrieval_validator(lookup, data / "squad" / "beir", "val")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    rng, order = random.Random(seed), []
    out = {"name": name, "settings": dict(lr=lr, beta=beta, lam=lam, rec=rec, match_on=match_on, loss=loss, hard=hard,
                                          batch=batch, scale=scale, logvar_bias=logvar_bias, steps=steps),
           "evals": [(0, round(validate(model), 4))], "train": []}
    sums, started = np.zeros(2), time.time()
    for step in range(1, steps + 1):
        if len(order) < batch:
            order += rng.sample(range(len(pairs)), len(pairs))
        idx, order = order[:batch], order[batch:]
        model.train()
        mu_q, lv_q = model.question_head(qf[idx])
        mu_a, lv_a = model.answer_head(af[idx])
        zq, za = reparameterize(mu_q, lv_q), reparameterize(mu_a, lv_a)
        zero = torch.zeros(())
        rec_terms = (model.question_decoder.nll(za, trim_padding(qt[idx])).mean() + model.answer_decoder.nll(zq, trim_padding(at[idx])).mean()
                     if rec else zero)
        kl = gaussian_kl(mu_q, lv_q).mean() + gaussian_kl(mu_a, lv_a).mean()
        mq, ma = (mu_q, mu_a) if match_on == "means" else (zq, za)
        if hard:
            wrong = [t for i in idx for t in rng.sample(pairs[i][2], min(hard, len(pairs[i][2])))]
            if wrong:
                mu_n, lv_n = model.answer_head(torch.as_tensor(lookup(wrong)))
                ma = torch.cat([ma, mu_n if match_on == "means" else reparameterize(mu_n, lv_n)])
        match = matching_loss(mq, ma, model.match_weight.abs(), model.match_bias, loss)
        total = rec * rec_terms + beta * kl + lam * match
        if step == 1:
            out["first_step"] = first_step_diagnostics(model, mu_q, lv_q, mu_a, zq, za, lam * match,
                                                       rec * rec_terms + beta * kl, len(ma))
        optimizer.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        sums += (float(match), float(match_accuracy(mq, ma)))
        done = step - (out["train"][-1]["step"] if out["train"] else 0)
        if step % eval_every == 0 or step == steps:
            model.eval()
            out["evals"].append((step, round(validate(model), 4)))
            out["train"].append(dict(step=step, match=round(sums[0] / done, 4), top1=round(sums[1] / done, 3),
                                     chance_top1=round(1 / len(ma), 4), kl=round(float(kl), 1)))
            sums[:] = 0
    out["seconds"] = round(time.time() - started)
    return out


def first_step_diagnostics(model, mu_q, lv_q, mu_a, zq, za, match_term, other_terms, candidates: int) -> dict:
    """Latent scales, the aligned pairs' cosine at the means and on samples, and the gradient each
    part of the loss sends to the question head."""
    params = list(model.question_head.parameters())

    def flat_grad(term: torch.Tensor) -> torch.Tensor:
        if not term.requires_grad:
            return torch.zeros(sum(p.numel() for p in params))
        grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
        return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])

    g_match, g_other = flat_grad(match_term), flat_grad(other_terms)
    n = len(mu_q)
    with torch.no_grad():
        return dict(mu_norm=round(float(mu_q.norm(dim=1).mean()), 3), sigma=round(float((0.5 * lv_q).exp().mean()), 3),
                    noise_norm=round(float((0.5 * lv_q).exp().pow(2).sum(1).sqrt().mean()), 2),
                    cos_aligned_means=round(float(F.cosine_similarity(mu_q, mu_a[:n]).mean()), 3),
                    cos_aligned_samples=round(float(F.cosine_similarity(zq, za[:n]).mean()), 3),
                    grad_match=round(float(g_match.norm()), 3), grad_other=round(float(g_other.norm()), 3),
                    grad_cosine=round(float(F.cosine_similarity(g_match, g_other, 0)), 3) if g_other.any() else 0.0,
                    chance_bce=round(2 * math.log(2), 4), chance_top1=round(1 / candidates, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with squad, wikiqa, trecqa")
    parser.add_argument("--work", type=Path, required=True, help="feature cache")
    parser.add_argument("--only", nargs="*", default=list(RUNS), choices=list(RUNS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    features = text_features(args.data, args.work)
    for name in args.only:
        print(json.dumps(run(name, args.data, features, **RUNS[name])), flush=True)


if __name__ == "__main__":
    main()
