"""Distil a transformer teacher (MiniLM) into the static encoder (``hybrid_qpr.model.static``).

Two stages, both from the teacher alone (no labels):

1. **Start** (``token_start``): every WordPiece token goes through the fp32 teacher on its own
   (``[CLS] token [SEP]``, mean pooled), the vectors are projected on the teacher's principal
   directions (``teacher_projection``: the top ``dim`` right singular vectors of the corpus'
   teacher sentence vectors, uncentred, so inner products keep their meaning), and each row is
   weighted by ``a / (a + p(token))`` with ``p`` the token's frequency in the corpus (SIF,
   Arora et al. 2017): common tokens ("the", "?", ``[CLS]``) weigh little in the sum.
   This is the static distillation of model2vec (Tulkens & van Dongen 2024), written here
   against the project's own tokenizer and teacher so it needs nothing beyond torch and
   transformers, which the teacher needs anyway.
2. **Training** (``distill_static``): the table (and the optional contextual layer) is trained
   on the corpus to reproduce the teacher's sentence vectors: cosine regression onto the
   projected teacher vector plus the in-batch distillation KL of ``distill`` (teacher
   neighbour batches), on the one trainer (checkpointed each epoch, resumable, early stopping on
   teacher agreement of held-out questions).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hybrid_qpr.artifacts import recorded_path
from hybrid_qpr.model.losses.distillation import InBatchDistillationLoss
from hybrid_qpr.model.static import StaticEmbeddingModel

log = logging.getLogger(__name__)

SIF_A = 1e-3


def teacher_projection(teacher: np.ndarray, dim: int, sample: int = 50_000, seed: int = 13) -> np.ndarray:
    """[D, dim]: the teacher space's top ``dim`` right singular vectors (uncentred) over a sample of rows."""
    rows = np.random.default_rng(seed).permutation(teacher.shape[0])[:sample]
    _, _, vt = np.linalg.svd(np.asarray(teacher[np.sort(rows)], dtype=np.float64), full_matrices=False)
    return np.ascontiguousarray(vt[:dim].T.astype(np.float32))


def token_frequencies(tokenizer, texts: Sequence[str], vocab_size: int) -> np.ndarray:
    """Share of all tokens (specials included) that each vocabulary id makes up in ``texts``."""
    counts = np.zeros(vocab_size, dtype=np.float64)
    for start in range(0, len(texts), 4096):
        for encoding in tokenizer.encode_batch(list(texts[start:start + 4096])):
            np.add.at(counts, encoding.ids, 1)
    return counts / max(counts.sum(), 1.0)


@torch.no_grad()
def teacher_token_vectors(vocab_size: int, cls_id: int, sep_id: int, base_model: str | Path | None = None,
                          batch_size: int = 1024) -> np.ndarray:
    """[vocab, D] fp32 teacher vector of every token alone (``[CLS] t [SEP]``, mean pooled)."""
    from hybrid_qpr.model.transformer import load_backbone, mean_pool

    backbone, _ = load_backbone(base_model)
    backbone.eval()
    out = []
    for start in range(0, vocab_size, batch_size):
        ids = torch.arange(start, min(start + batch_size, vocab_size))
        batch = torch.stack([torch.full_like(ids, cls_id), ids, torch.full_like(ids, sep_id)], dim=1)
        mask = torch.ones_like(batch)
        hidden = backbone(input_ids=batch, attention_mask=mask, token_type_ids=torch.zeros_like(batch)).last_hidden_state
        out.append(mean_pool(hidden, mask).numpy())
    return np.concatenate(out).astype(np.float32)


def token_start(token_vectors: np.ndarray, projection: np.ndarray, frequencies: np.ndarray, a: float = SIF_A) -> np.ndarray:
    """The static table's starting rows: projected token vectors times their SIF weight."""
    weights = a / (a + frequencies)
    return (token_vectors @ projection * weights[:, None].astype(np.float32)).astype(np.float32)


class StaticDistillationLoss(nn.Module):
    """``1 - cos(student, P·teacher)`` (mean) + ``kl_weight`` × in-batch KL to the teacher.

    The student is unit length, so its in-batch logits are ``-|s_i - s_j|^2 / τ_s = (2cos - 2) / τ_s``;
    ``τ_s = 2 τ_t`` puts them on the teacher's ``cos / τ_t`` scale."""

    search_distance = "cosine"

    def __init__(self, projection: np.ndarray, kl_weight: float = 1.0, teacher_temperature: float = 0.05):
        super().__init__()
        self.register_buffer("projection", torch.from_numpy(np.asarray(projection, dtype=np.float32)))
        self.kl_weight = float(kl_weight)
        self.kl = InBatchDistillationLoss(teacher_temperature, 2 * teacher_temperature)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        target = F.normalize(teacher.float() @ self.projection, dim=1)
        loss = (1 - (F.normalize(student, dim=1) * target).sum(1)).mean()
        if self.kl_weight:
            loss = loss + self.kl_weight * self.kl(student, teacher)
        return loss


def distill_static(corpus: Sequence[str | Path], teacher_dir: str | Path, run_dir: str | Path, *,
                   tokenizer_path: str | Path, dim: int = 256, window: int = 0, kl_weight: float = 1.0,
                   group_size: int = 8, held_out: int = 2000, train_config=None, teacher_cache: str | Path | None = None,
                   base_model: str | Path | None = None, resume: bool = False, show_progress: bool = True):
    """Train a static encoder in ``run_dir`` (``best.pt``, ``model.json``); export with
    ``hybrid_qpr.export.static.export_static_run``. ``teacher_dir`` is the teacher's encoder
    directory (its sentence vectors, cached); ``base_model`` its fp32 weights for the token start
    (default: the bundled all-MiniLM-L6-v2)."""
    import json

    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.training.cnn import CHECKPOINT, TrainConfig, train, write_run_meta
    from hybrid_qpr.training.distill import DistillationSource, load_questions, teacher_neighbours
    from hybrid_qpr.training.teacher import corpus_fingerprint, teacher_embeddings

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    train_config = train_config or TrainConfig()
    sources = [Path(c) for c in corpus]
    texts = load_questions(sources, seed=train_config.seed)
    encoder = Encoder.load(teacher_dir)
    cache_dir = Path(teacher_cache) if teacher_cache else run_dir / "teacher"
    teacher = teacher_embeddings(encoder, texts, cache_dir, show_progress=show_progress)
    rng = random.Random(train_config.seed)
    val_rows = sorted(rng.sample(range(len(texts)), min(held_out, len(texts) // 5)))
    rows = sorted(set(range(len(texts))) - set(val_rows))

    import shutil

    shutil.copyfile(tokenizer_path, run_dir / "tokenizer.json")  # the run directory is self-contained
    vocab_size = len(json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))["model"]["vocab"])
    torch.manual_seed(train_config.seed)
    model = StaticEmbeddingModel(run_dir / "tokenizer.json", vocab_size, dim, window=window)
    projection = teacher_projection(teacher, dim, seed=train_config.seed)
    if not (resume and (run_dir / CHECKPOINT).exists()):
        tok = model.tokenizer
        vectors_file = cache_dir / f"token-vectors-{vocab_size}.npy"  # the fp32 teacher's, reused across runs
        if vectors_file.is_file():
            vectors = np.load(vectors_file)
        else:
            vectors = teacher_token_vectors(vocab_size, tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"), base_model)
            np.save(vectors_file, vectors)
        start = token_start(vectors, projection, token_frequencies(tok, [texts[i] for i in rows], vocab_size))
        with torch.no_grad():
            model.embedding.weight.copy_(torch.from_numpy(start))

    loss = StaticDistillationLoss(projection, kl_weight)
    neighbours = None
    if group_size > 1:
        key = f"{corpus_fingerprint(texts)}-{encoder.fingerprint}-k32"
        neighbours = teacher_neighbours(teacher, 32, cache_dir / f"neighbours-{key}.npy")
    source = DistillationSource(texts, teacher, loss, batch_size=train_config.batch_size, train_rows=rows,
                                neighbours=neighbours, group_size=group_size, val_rows=val_rows)
    options = {"teacher": recorded_path(teacher_dir), "teacher_fingerprint": encoder.fingerprint,
               "corpus": [recorded_path(c) for c in sources], "corpus_questions": len(texts), "kl_weight": kl_weight,
               "group_size": group_size, "start": "teacher token vectors, uncentred teacher PCA, SIF a=1e-3",
               "validation": f"teacher agreement on {len(val_rows)} held-out questions"}
    write_run_meta(run_dir, architecture=model.hparams, loss="static-distill", loss_options=options, loss_fn=loss,
                   dataset_dir=sources[0])
    return train(model, loss, [], None, run_dir, train_config, resume=resume, show_progress=show_progress, source=source)
