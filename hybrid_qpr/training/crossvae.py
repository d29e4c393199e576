"""Train Cross-VAE (``hybrid_qpr.model.crossvae``) on question -> answer-sentence pairs and
export it as an asymmetric ONNX model directory (question side, answer side).

Steps:

1. pairs: every (question, correct sentence) of the train split of one or more answer
   datasets (``hybrid-qpr dataset from-squad`` / ``from-answers``);
2. features: the frozen pretrained encoder (MiniLM, mean pooling over at most ``max_length``
   tokens, not normalised) embeds every distinct text once; cached in the run directory
   (``features.npy`` + ``features.json``) so a rerun or ``resume`` skips it;
3. training: Adam over shuffled batches of pairs, the loss of the model docstring with β
   annealed from 0 to ``beta`` over ``kl_warmup`` steps, gradient norm clipped at 1; every
   loss term is logged per epoch (``log.jsonl``); after each epoch the validation metric
   (MRR of answer retrieval on ``val_dataset``'s BEIR val split, ranking by the cosine of
   latent means) picks the best epoch and stops after ``patience`` epochs without gain;
   a checkpoint (model, optimizer, epoch, best state) is written atomically each epoch;
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

from hybrid_qpr.artifacts import atomic_write, load_checkpoint, recorded_path, save_checkpoint
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.crossvae import CrossVAE, LossTerms
from hybrid_qpr.progress import track
from hybrid_qpr.text.tokenizer import Vocabulary

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"


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
    lr: float = 1e-3
    beta: float = 1.0  # KL weight after warm-up
    kl_warmup: int = 300  # steps of linear KL annealing from 0
    lam: float = 1.0  # matching-loss weight
    match_on_means: bool = False  # score the matching term at the latent means, not the samples
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


def train_pairs(dataset_dirs: Sequence[str | Path]) -> list[tuple[str, str]]:
    """(question, correct sentence) for every positive of every train question."""
    from hybrid_qpr.data.answer_dataset import read_answer_records

    pairs = [(r.question, p) for d in dataset_dirs for r in read_answer_records(d, "train") for p in r.positives]
    if not pairs:
        raise ConfigError(f"{', '.join(map(str, dataset_dirs))}: no train question has a correct sentence")
    return pairs


def kl_weight(step: int, beta: float, warmup: int) -> float:
    """β·min(1, step / warmup): linear KL annealing (Bowman et al. 2016)."""
    return beta if warmup == 0 else beta * min(1.0, step / warmup)


def fit(model: CrossVAE, q_features: np.ndarray, a_features: np.ndarray, q_tokens: np.ndarray, a_tokens: np.ndarray,
        settings: CrossVAESettings, *, validate: Callable[[CrossVAE], float] | None = None,
        run_dir: Path | None = None) -> dict[str, Any]:
    """The training loop over aligned rows (row i of the four arrays is pair i).

    Returns ``{"history": [per-epoch mean loss terms, beta, val], "best_epoch", "best_val",
    "stopped"}`` and leaves the best validated state (or the last one without ``validate``)
    in ``model``. With ``validate``, the untrained state is scored first (epoch 0) and is kept
    if no epoch beats it."""
    settings.check()
    torch.manual_seed(settings.seed)
    n = len(q_features)
    tensors = [torch.as_tensor(x) for x in (q_features, a_features, q_tokens, a_tokens)]
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    start_epoch, step, best_val, best_epoch, best_state, history = 0, 0, -1.0, 0, None, []
    checkpoint = run_dir / CHECKPOINT_FILE if run_dir else None
    if checkpoint is not None and checkpoint.is_file():
        state = load_checkpoint(checkpoint, "remove it to start over")
        if _model_settings(state.get("settings") or {}) != _model_settings(dataclasses.asdict(settings)):
            raise ConfigError(f"{checkpoint} was written with other settings; remove it or use the same settings "
                              f"(only {', '.join(BUDGET_SETTINGS)} may change on resume)")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, step, best_val, best_epoch = state["epoch"], state["step"], state["best_val"], state["best_epoch"]
        best_state, history = state["best_state"], state["history"]
        logger.info("resuming %s after epoch %d", checkpoint, start_epoch)
    if validate is not None and start_epoch == 0:  # the untrained state is a candidate too (epoch 0)
        model.eval()
        best_val = validate(model)
        best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        history.append({"epoch": 0, "step": 0, "val": best_val})
        logger.info("epoch 0: val %.4f", best_val)
        if run_dir is not None:
            with (run_dir / "log.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(history[0]) + "\n")
    started = time.perf_counter()
    stopped = "epochs"
    for epoch in range(start_epoch, settings.epochs):
        model.train()
        order = list(range(n))
        random.Random(f"{settings.seed}:{epoch}").shuffle(order)
        sums: dict[str, float] = {}
        batches = 0
        starts = range(0, n - 1, settings.batch_size)  # a last batch of 1 pair has no negative: skipped
        for begin in track(starts, total=len(starts), description=f"crossvae epoch {epoch + 1}",
                           status=lambda: f"match {sums.get('match', 0.0) / max(batches, 1):.4f}"):
            idx = torch.as_tensor(order[begin:begin + settings.batch_size])
            if len(idx) < 2:
                continue
            qf, af, qt, at = (t[idx] for t in tensors)
            terms: LossTerms = model.loss_terms(qf, af, _trim(qt), _trim(at), match_on_means=settings.match_on_means)
            beta = kl_weight(step, settings.beta, settings.kl_warmup)
            loss = terms.total(beta, settings.lam)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            batches += 1
            for k, v in terms.as_floats().items():
                sums[k] = sums.get(k, 0.0) + v
        row: dict[str, Any] = {"epoch": epoch + 1, "step": step, "beta": kl_weight(step, settings.beta, settings.kl_warmup),
                               **{k: v / max(batches, 1) for k, v in sums.items()}}
        if validate is not None:
            model.eval()
            row["val"] = validate(model)
            if row["val"] > best_val:
                best_val, best_epoch = row["val"], epoch + 1
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        history.append(row)
        logger.info("epoch %d: %s", epoch + 1, ", ".join(f"{k} {v:.4f}" for k, v in row.items() if isinstance(v, float)))
        if run_dir is not None:
            with (run_dir / "log.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                         "step": step, "best_val": best_val, "best_epoch": best_epoch, "best_state": best_state,
                         "history": history, "settings": dataclasses.asdict(settings)}, checkpoint)
        if validate is not None and epoch + 1 - best_epoch >= settings.patience:
            stopped = "patience"
            break
        if settings.max_minutes is not None and time.perf_counter() - started > 60 * settings.max_minutes:
            stopped = "max_minutes"
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"history": history, "best_epoch": best_epoch, "best_val": best_val, "stopped": stopped}


BUDGET_SETTINGS = ("epochs", "patience", "max_minutes")  # how long to train, not what: may change on resume


def _model_settings(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in BUDGET_SETTINGS}


def _trim(tokens: torch.Tensor) -> torch.Tensor:
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
                        split: str = "val") -> Callable[[CrossVAE], float]:
    """A function model -> MRR of answer retrieval on a BEIR split, ranking the corpus by the
    cosine of latent means (what the exported index does)."""
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.evaluator import exact_run
    from hybrid_qpr.evaluation.tasks import get_task

    corpus, queries, qrels = load_beir(beir_dir, split)  # type: ignore[arg-type]
    doc_ids, q_ids = list(corpus), list(queries)
    doc_features = torch.as_tensor(model_features([corpus[d] for d in doc_ids]))
    q_features = torch.as_tensor(model_features([queries[q] for q in q_ids]))
    task = get_task("answer-retrieval")

    def validate(model: CrossVAE) -> float:
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
    pairs = train_pairs(dataset_dirs)
    embedder = TransformerEmbedder.from_dir(base_model, max_length=settings.max_length, normalize=False)
    embedder.eval()
    texts = sorted({t for pair in pairs for t in pair})
    position = {t: i for i, t in enumerate(texts)}
    features = sentence_features(embedder, texts, out_dir)
    vocab = Vocabulary.build((t for pair in pairs for t in pair), top_words=settings.vocab, hash_bins=1,
                             max_length=settings.decoder_max_tokens)
    vocab.save(out_dir / "decoder-vocab.json")
    rows = [position[q] for q, _ in pairs], [position[a] for _, a in pairs]
    q_tokens = vocab.encode_batch([q for q, _ in pairs])
    a_tokens = vocab.encode_batch([a for _, a in pairs])
    model = CrossVAE(features.shape[1], vocab.size, latent=settings.latent, hidden=settings.hidden,
                     embedding=settings.embedding, decoder_hidden=settings.decoder_hidden)
    validate = None
    if val_beir is not None:
        validate = retrieval_validator(lambda ts: sentence_features(embedder, ts, out_dir), val_beir)
    (out_dir / "settings.json").write_text(json.dumps(dataclasses.asdict(settings), indent=2) + "\n")
    started = time.perf_counter()
    result = fit(model, features[rows[0]], features[rows[1]], q_tokens, a_tokens, settings, validate=validate,
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
