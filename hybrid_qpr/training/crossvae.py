"""Train Cross-VAE (``hybrid_qpr.model.crossvae``) on question -> answer-sentence pairs and
export it as an asymmetric ONNX model directory (question side, answer side).

Steps:

1. pairs: every (question, correct sentence) of the train split of one or more answer
   datasets (``hybrid-qpr dataset from-squad`` / ``from-answers``);
2. features: the frozen pretrained encoder (MiniLM, mean pooling over at most ``max_length``
   tokens, not normalised) embeds every distinct text once; cached in the run directory
   (``features.npy`` + ``features.json``) so a rerun or ``resume`` skips it;
3. training, by the one trainer (``hybrid_qpr.training.trainer``, epoch mode): Adam over
   shuffled batches of pairs, the loss of the model docstring with β annealed from 0 to
   ``beta`` over ``kl_warmup`` steps, gradient norm clipped at 1; each epoch's mean loss terms
   (and the mean β of its steps) are logged (``log.jsonl``); after each epoch the validation
   metric (MRR of answer retrieval on ``val_dataset``'s BEIR val split, ranking by the cosine
   of latent means) picks the best epoch (``best.pt``) and stops after ``patience`` epochs
   without gain; a checkpoint is written atomically each epoch and a rerun resumes from it
   (``epochs``, ``patience``, ``max_minutes`` may change; a checkpoint from before the one
   trainer is refused in one line);
4. export: each side is the pretrained backbone + mean pooling + its head's μ (+ L2
   normalisation), exported by ``hybrid_qpr.export.transformer`` (parity-checked, optional
   int8) and put together by ``hybrid_qpr.export.asymmetric``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid_qpr.artifacts import atomic_write, recorded_path
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.crossvae import MATCH_LOSSES, CrossVAE, LossTerms
from hybrid_qpr.progress import track
from hybrid_qpr.text.tokenizer import Vocabulary
from hybrid_qpr.training.trainer import TrainerSettings

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class CrossVAESettings:
    latent: int = 384  # the MiniLM width: an untrained head then keeps MiniLM's cosines exactly
    hidden: int = 256
    embedding: int = 128
    decoder_hidden: int = 256
    vocab: int = 8000  # decoder words (others share one unknown-word id)
    decoder_max_tokens: int = 40
    max_length: int = 128  # backbone tokens per text ([CLS]/[SEP] included), as in ASBERT
    batch_size: int = 64
    epochs: int = 20
    lr: float = 1e-5  # 1e-4 and above move the heads' 384x384 map off the MiniLM geometry (docs/answers.md)
    beta: float = 1.0  # KL weight after warm-up
    kl_warmup: int = 300  # steps of linear KL annealing from 0
    lam: float = 1.0  # matching-loss weight
    match_on_means: bool = True  # on samples the cosine is noise (σ ≈ 1 per dimension against |μ| ≈ 5 in 384)
    match_loss: str = "softmax"  # or "bce" (the paper's predictor); bce lowers retrieval MRR even as it learns
    hard_negatives: int = 1  # labelled wrong sentences of each question added to the matching candidates
    match_scale: float = 20.0  # initial w of w·cos (a softmax temperature of 0.05)
    max_negatives: int = 20  # wrong sentences kept (and embedded) per question: the first listed
    train_encoder: bool = False  # back-propagate into the pretrained encoder (no feature cache)
    max_pairs: int | None = None  # train on a seeded sample of this many pairs (a CPU time budget)
    patience: int = 4  # epochs without a better validation MRR before stopping
    max_minutes: float | None = None
    seed: int = 0

    def check(self) -> None:
        for name in ("latent", "hidden", "embedding", "decoder_hidden", "vocab", "decoder_max_tokens", "max_length",
                     "epochs", "patience"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)}: must be >= 1")
        if self.batch_size < 2:
            raise ConfigError(f"batch_size={self.batch_size}: the matching loss needs >= 2 pairs per batch")
        if not self.lr > 0 or self.beta < 0 or self.lam < 0 or self.kl_warmup < 0:
            raise ConfigError("lr must be > 0 and beta, lam, kl_warmup >= 0")
        if self.match_loss not in MATCH_LOSSES:
            raise ConfigError(f"match_loss={self.match_loss!r}: allowed values are {', '.join(MATCH_LOSSES)}")
        if self.hard_negatives < 0 or self.max_negatives < 0:
            raise ConfigError("hard_negatives and max_negatives must be >= 0")

    def trainer_settings(self) -> TrainerSettings:
        """Adam (no weight decay) at a constant ``lr``, gradient norm clipped at 1, one
        evaluation per epoch."""
        return TrainerSettings(epochs=self.epochs, lr=self.lr, clip=1.0, patience=self.patience,
                               max_minutes=self.max_minutes, seed=self.seed, schedule="constant", weight_decay=0.0)


def train_pairs(dataset_dirs: Sequence[str | Path], max_negatives: int = 0) -> list[tuple[str, str, list[str]]]:
    """(question, correct sentence, the question's first ``max_negatives`` wrong sentences) for
    every positive of every train question."""
    from hybrid_qpr.data.answer_dataset import read_answer_records

    pairs = [(r.question, p, r.negatives[:max_negatives]) for d in dataset_dirs for r in read_answer_records(d, "train")
             for p in r.positives]
    if not pairs:
        raise ConfigError(f"{', '.join(map(str, dataset_dirs))}: no train question has a correct sentence")
    return pairs


def kl_weight(step: int, beta: float, warmup: int) -> float:
    """β·min(1, step / warmup): linear KL annealing (Bowman et al. 2016)."""
    return beta if warmup == 0 else beta * min(1.0, step / warmup)


def fit(model: CrossVAE, q_features, a_features, q_tokens: np.ndarray, a_tokens: np.ndarray,
        settings: CrossVAESettings, *, negative_features=None, negatives: Sequence[Sequence[int]] | None = None,
        encoder=None, validate: Callable[[CrossVAE], float] | None = None,
        run_dir: Path | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Train over aligned rows (row i of the four arrays is pair i) with the one trainer
    (``hybrid_qpr.training.trainer``, epoch mode); a checkpoint in ``run_dir`` is resumed.

    ``negatives[i]`` lists the rows of ``negative_features`` that are wrong answers of pair i's
    question; each step draws ``settings.hard_negatives`` of them per pair (from the seed and the
    step alone, so a resumed run draws the same) as extra matching candidates. With ``encoder``
    (a ``TransformerEmbedder`` trained along, ``settings.train_encoder``) the three feature
    arguments are texts, embedded at every step, and the encoder is checkpointed with the model.

    Returns ``{"history": [per-epoch mean loss terms, beta, val], "best_epoch", "best_val",
    "stopped"}`` and leaves the best validated state (or the last one without ``validate``)
    in ``model`` (and ``encoder``). With ``validate``, the untrained state is scored first
    (epoch 0) and is kept if no epoch beats it."""
    from torch import nn

    from hybrid_qpr.training.trainer import Trainer

    settings.check()
    n = len(q_tokens)
    q_tokens, a_tokens = torch.as_tensor(q_tokens), torch.as_tensor(a_tokens)
    if encoder is None:
        sources = [None if x is None else torch.as_tensor(x) for x in (q_features, a_features, negative_features)]
    else:
        sources = [q_features, a_features, negative_features]
    trainer: Trainer | None = None

    def rows(source, idx: list[int]) -> torch.Tensor:
        if encoder is None:
            return source[idx]
        return encoder(encoder.collate([source[i] for i in idx]))

    def batches(epoch: int) -> list[torch.Tensor]:
        order = list(range(n))
        random.Random(f"{settings.seed}:{epoch}").shuffle(order)
        # a last batch of 1 pair has no negative: skipped
        return [torch.as_tensor(order[i:i + settings.batch_size]) for i in range(0, n - 1, settings.batch_size)
                if len(order[i:i + settings.batch_size]) >= 2]

    def step_loss(idx: torch.Tensor) -> dict[str, float]:
        idx_list = idx.tolist()
        draw = random.Random(f"{settings.seed}:negatives:{trainer.step}")
        hard = [j for i in idx_list for j in draw.sample(list(negatives[i]), min(settings.hard_negatives, len(negatives[i])))
                ] if negatives is not None and sources[2] is not None else []
        terms: LossTerms = model.loss_terms(rows(sources[0], idx_list), rows(sources[1], idx_list), trim_padding(q_tokens[idx]),
                                            trim_padding(a_tokens[idx]), match_on_means=settings.match_on_means,
                                            match_loss=settings.match_loss,
                                            negative_features=rows(sources[2], hard) if hard else None)
        beta = kl_weight(trainer.step, settings.beta, settings.kl_warmup)  # the steps done before this one
        loss = terms.total(beta, settings.lam)
        loss.backward()
        return {"loss": float(loss.detach()), "beta": beta, **terms.as_floats()}

    trained = model if encoder is None else nn.ModuleDict({"crossvae": model, "encoder": encoder})
    trainer = Trainer(trained, settings.trainer_settings(), run_dir, step_loss=step_loss,
                      evaluate=None if validate is None else (lambda: validate(model)), batches=batches,
                      run_settings=dataclasses.asdict(settings), defaults=dataclasses.asdict(CrossVAESettings()),
                      description="crossvae", metric="val", start_over="remove it to start over")
    result = trainer.run(resume=True, show_progress=show_progress)
    return {"history": result.history, "best_epoch": result.best_epoch or 0, "best_val": result.best_metric,
            "stopped": result.stopped}


def trim_padding(tokens: torch.Tensor) -> torch.Tensor:
    """Drop the all-padding columns at the right of a batch (shorter GRU runs)."""
    width = int((tokens > 0).sum(1).max().clamp(min=1))
    return tokens[:, :width]


# ---------------------------------------------------------------- features and the full run
def _text_key(texts: Sequence[str], max_length: int, source: str) -> str:
    digest = hashlib.sha256(f"{source}\n{max_length}\n".encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


def sentence_features(embedder, texts: Sequence[str], cache_dir: Path | None, batch_size: int = 64) -> np.ndarray:
    """Mean-pooled backbone features of ``texts`` (float32 [n, F]), cached by content."""
    key = _text_key(texts, embedder.max_length, embedder.source)
    if cache_dir is not None and (cache_dir / f"features-{key}.npy").is_file():
        return np.load(cache_dir / f"features-{key}.npy")

    order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths per batch: less padding
    features = np.zeros((len(texts), embedder.dim), np.float32)
    for i in track(range(0, len(texts), batch_size), total=-(-len(texts) // batch_size), description="features"):
        rows = order[i:i + batch_size]
        features[rows] = embedder.encode([texts[j] for j in rows]).numpy()
    if cache_dir is not None:
        with atomic_write(cache_dir / f"features-{key}.npy", mode="wb") as fh:
            np.save(fh, features)
    return features


def retrieval_validator(model_features: Callable[[Sequence[str]], np.ndarray], beir_dir: str | Path,
                        split: str = "val", *, recompute: bool = False) -> Callable[[CrossVAE], float]:
    """A function model -> MRR of answer retrieval on a BEIR split, ranking the corpus by the
    cosine of latent means (what the exported index does). The texts' features are computed
    once, or at every call with ``recompute`` (an encoder that trains changes them)."""
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.evaluator import exact_run
    from hybrid_qpr.evaluation.tasks import get_task

    corpus, queries, qrels = load_beir(beir_dir, split)  # type: ignore[arg-type]
    doc_ids, q_ids = list(corpus), list(queries)
    task = get_task("answer-retrieval")

    def features() -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.as_tensor(model_features([queries[q] for q in q_ids])),
                torch.as_tensor(model_features([corpus[d] for d in doc_ids])))

    fixed = None if recompute else features()

    def validate(model: CrossVAE) -> float:
        q_features, doc_features = fixed or features()
        run = exact_run(q_ids, model.means(q_features, "query").numpy(), doc_ids,
                        model.means(doc_features, "document").numpy(), "cosine", retrieve=task.retrieve)
        return task.score(run, qrels)[task.main_metric]

    return validate


def train_crossvae(dataset_dirs: Sequence[str | Path], out_dir: str | Path, settings: CrossVAESettings, *,
                   val_beir: str | Path | None = None, export_dir: str | Path | None = None, quantize: bool = False,
                   base_model: str | Path | None = None) -> dict[str, Any]:
    """The full run (module docstring); returns a report with the per-epoch history."""
    from hybrid_qpr.model.transformer import TransformerEmbedder

    settings.check()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = train_pairs(dataset_dirs, settings.max_negatives if settings.hard_negatives else 0)
    if settings.max_pairs is not None and len(pairs) > settings.max_pairs:
        pairs = random.Random(settings.seed).sample(pairs, settings.max_pairs)
    embedder = TransformerEmbedder.from_dir(base_model, max_length=settings.max_length, normalize=False)
    embedder.eval()
    texts = sorted({t for q, a, wrong in pairs for t in (q, a, *wrong)})
    position = {t: i for i, t in enumerate(texts)}
    vocab = Vocabulary.build((t for q, a, _ in pairs for t in (q, a)), top_words=settings.vocab, hash_bins=1,
                             max_length=settings.decoder_max_tokens)
    vocab.save(out_dir / "decoder-vocab.json")
    rows = [position[q] for q, _, _ in pairs], [position[a] for _, a, _ in pairs]
    negatives = [[position[t] for t in wrong] for _, _, wrong in pairs]
    q_tokens = vocab.encode_batch([q for q, _, _ in pairs])
    a_tokens = vocab.encode_batch([a for _, a, _ in pairs])
    if settings.train_encoder:  # texts go in and are embedded at every step
        text_sources = ([texts[i] for i in rows[0]], [texts[i] for i in rows[1]], texts)
        feature_dim = embedder.dim
    else:
        features = sentence_features(embedder, texts, out_dir)
        text_sources = (features[rows[0]], features[rows[1]], features)
        feature_dim = features.shape[1]
    model = CrossVAE(feature_dim, vocab.size, latent=settings.latent, hidden=settings.hidden,
                     embedding=settings.embedding, decoder_hidden=settings.decoder_hidden,
                     match_scale=settings.match_scale)
    validate = None
    if val_beir is not None:
        if settings.train_encoder:
            validate = retrieval_validator(lambda ts: embedder.encode(list(ts)).numpy(), val_beir, recompute=True)
        else:
            validate = retrieval_validator(lambda ts: sentence_features(embedder, ts, out_dir), val_beir)
    (out_dir / "settings.json").write_text(json.dumps(dataclasses.asdict(settings), indent=2) + "\n")
    started = time.perf_counter()
    result = fit(model, *text_sources[:2], q_tokens, a_tokens, settings, negative_features=text_sources[2],
                 negatives=negatives, encoder=embedder if settings.train_encoder else None, validate=validate,
                 run_dir=out_dir)
    torch.save(model.state_dict(), out_dir / "crossvae.pt")
    report = {"pairs": len(pairs), "texts": len(texts), "datasets": [recorded_path(d) for d in dataset_dirs],
              "val_beir": recorded_path(val_beir) if val_beir else None, "seconds": round(time.perf_counter() - started, 1),
              **result}
    if export_dir is not None:
        report["export"] = str(export_crossvae(model, embedder, export_dir, quantize=quantize,
                                               training={**dataclasses.asdict(settings), "report": report}))
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def export_crossvae(model: CrossVAE, embedder, export_dir: str | Path, *, quantize: bool = False,
                    training: dict[str, Any] | None = None) -> Path:
    """Export the question and answer sides (backbone + head μ, L2-normalised) and assemble
    them into an asymmetric model directory at ``export_dir``."""
    import tempfile

    from hybrid_qpr.export.asymmetric import assemble_asymmetric
    from hybrid_qpr.export.transformer import export_transformer
    from hybrid_qpr.model.crossvae import latent_mean_embedder

    export_dir = Path(export_dir)
    export_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=export_dir.parent, prefix=f".{export_dir.name}.sides.") as tmp:
        sides = {}
        for side, head in (("question", model.question_head), ("answer", model.answer_head)):
            side_model = latent_mean_embedder(embedder, head)
            export_transformer(side_model, Path(tmp) / side, quantize=quantize, training={"crossvae_side": side})
            sides[side] = Path(tmp) / side
        return assemble_asymmetric(export_dir, sides["question"], sides["answer"],
                                   extra={"model": "cross-vae", "training": training or {}})
