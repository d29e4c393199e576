"""Distillation of a teacher encoder (e.g. MiniLM) into the CNN: questions, batches, validation.

The student never sees labels: every epoch shuffles the corpus questions into batches, and
``InBatchDistillationLoss`` makes the student's in-batch similarity distribution match the
teacher's (cached vectors, ``hybrid_qpr.training.teacher``). With ``neighbours > 0`` a batch
is built from groups of teacher nearest neighbours (a random seed question and its closest
unused questions), so the student also learns the teacher's order among close questions, not
only "far from random questions". Labelled pairs (``pairs``, a dataset's training clusters)
optionally add the SDML loss on a batch of pairs at every step.

``DistillationSource`` is the batch source the CNN loop (``hybrid_qpr.training.cnn.train``, on
the one trainer) accepts in place of its pair batches.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from hybrid_qpr.artifacts import recorded_path
from hybrid_qpr.data.clusters import Cluster
from hybrid_qpr.errors import ConfigError, InputError

log = logging.getLogger(__name__)


def load_questions(path: str | Path, text_column: str = "text") -> list[str]:
    """Distinct question texts, in file order, of a corpus to distil on.

    ``path`` is a JSONL/TSV/CSV corpus (read like ``hybrid-qpr ingest``), a BEIR directory (its
    ``corpus.jsonl``), or a dataset directory of ``hybrid-qpr dataset build`` (its train split
    only, so val/test questions stay unseen).
    """
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.data.splits import load_split

    path = Path(path)
    if path.is_dir():
        if (path / "manifest.json").is_file() and (path / "train.jsonl").is_file():
            texts = (q.text for c in load_split(path, "train") for q in c.questions)
        elif (path / "corpus.jsonl").is_file():
            texts = (doc.text for _, doc in iter_documents(path / "corpus.jsonl", fmt="jsonl"))
        else:
            raise InputError(path, None, "directory is neither a dataset (manifest.json + train.jsonl) nor BEIR (corpus.jsonl)")
    else:
        texts = (doc.text for _, doc in iter_documents(path, text_column=text_column))
    seen: set[str] = set()
    out = []
    for text in texts:
        if text.strip() and text not in seen:
            seen.add(text)
            out.append(text)
    if len(out) < 2:
        raise InputError(path, None, f"{len(out)} distinct non-empty questions; distillation needs at least 2")
    return out


def teacher_neighbours(teacher: np.ndarray, k: int, cache_file: str | Path | None = None) -> np.ndarray:
    """Each row's ``k`` nearest other rows by teacher cosine [n, k] (vectors are unit length).

    A FAISS HNSW graph (M 32, efSearch 2k): 99.9% of the exact top 8 on the Quora train
    questions, built in about 2 minutes on 2 busy cores where the exact all-pairs product
    took over 10. Cached in ``cache_file`` when given (written atomically; reused when its
    shape fits).
    """
    import faiss

    from hybrid_qpr.artifacts import atomic_write

    n = teacher.shape[0]
    k = min(k, n - 1)
    if cache_file is not None and Path(cache_file).exists():
        cached = np.load(cache_file)
        if cached.shape == (n, k):
            return cached
    vectors = np.array(teacher, dtype=np.float32)  # a contiguous in-memory copy of the memory map
    index = faiss.IndexHNSWFlat(vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 64
    index.add(vectors)
    index.hnsw.efSearch = max(64, 2 * k)
    _, found = index.search(vectors, k + 1)
    out = np.empty((n, k), dtype=np.int64)
    for i, row in enumerate(found):
        others = [j for j in row if j != i and j >= 0][:k]  # drop the row itself (and HNSW's -1 fillers)
        out[i, : len(others)] = others
        out[i, len(others):] = others[-1] if others else (i + 1) % n
    if cache_file is not None:
        with atomic_write(cache_file, "wb") as fh:
            np.save(fh, out)
    return out


def neighbour_groups(neighbours: np.ndarray, group_size: int, rng: random.Random,
                     rows: Sequence[int] | None = None) -> list[list[int]]:
    """Cover ``rows`` (default all) with groups of up to ``group_size`` rows: a random seed row
    and its nearest neighbours not yet taken (neighbours outside ``rows`` are skipped)."""
    rows = list(range(neighbours.shape[0])) if rows is None else list(rows)
    allowed = np.zeros(neighbours.shape[0], dtype=bool)
    allowed[rows] = True
    taken = ~allowed
    rng.shuffle(rows)
    groups = []
    for seed in rows:
        if taken[seed]:
            continue
        taken[seed] = True
        group = [seed]
        for j in neighbours[seed]:
            if len(group) >= group_size:
                break
            if not taken[j]:
                taken[j] = True
                group.append(int(j))
        groups.append(group)
    return groups


@dataclass
class DistillationBatch:
    questions: list[int]  # rows of the corpus / teacher matrix
    pairs: list | None = None  # a batch of labelled pairs (hybrid_qpr.training.cnn.Pair) for the SDML term


class DistillationSource:
    """Batches of corpus questions (+ optional labelled pairs) and the distillation step loss.

    ``texts`` and ``teacher`` (unit vectors, one row per text) are the corpus; ``train_rows`` the
    rows trained on (the rest may be held out for ``validate``). ``group_size`` > 1 builds
    batches from teacher-neighbour groups (``neighbours`` [n, k] needed). ``pairs`` (training
    clusters) add ``pairs_weight`` × SDML on one batch of ``batch_size / 2`` pairs per step.
    """

    def __init__(self, texts: Sequence[str], teacher: np.ndarray, loss: nn.Module, *, batch_size: int = 512,
                 train_rows: Sequence[int] | None = None, neighbours: np.ndarray | None = None, group_size: int = 1,
                 pairs: Sequence[Cluster] | None = None, pairs_loss: nn.Module | None = None, pairs_weight: float = 1.0,
                 val_rows: Sequence[int] | None = None):
        if group_size > 1 and neighbours is None:
            raise ConfigError("group_size > 1 needs the teacher neighbours")
        self.texts, self.teacher, self.loss = list(texts), teacher, loss
        self.batch_size, self.group_size, self.neighbours = batch_size, group_size, neighbours
        self.train_rows = list(range(len(self.texts))) if train_rows is None else list(train_rows)
        self.val_rows = list(val_rows or [])
        self.pairs, self.pairs_loss, self.pairs_weight = pairs, pairs_loss, pairs_weight

    def batches(self, rng: random.Random) -> list[DistillationBatch]:
        """One epoch: every training row once, in batches of ``batch_size`` (groups kept whole)."""
        if self.group_size > 1:
            groups = neighbour_groups(self.neighbours, self.group_size, rng, self.train_rows)
        else:
            rows = list(self.train_rows)
            rng.shuffle(rows)
            groups = [[r] for r in rows]
        batches, current = [], []
        for group in groups:
            if len(current) + len(group) > self.batch_size and len(current) >= 2:
                batches.append(current)
                current = []
            current.extend(group)
        if len(current) >= 2:
            batches.append(current)
        pair_batches: list = []
        if self.pairs:
            from hybrid_qpr.training.cnn import epoch_batches

            # one batch of batch_size / 2 pairs (as many questions as the distillation batch) per step
            while len(pair_batches) < len(batches):
                pair_batches += epoch_batches(self.pairs, max(2, self.batch_size // 2), rng) or [None]
        return [DistillationBatch(b, pair_batches[i] if pair_batches else None) for i, b in enumerate(batches)]

    def step_loss(self, model: nn.Module, batch: DistillationBatch) -> torch.Tensor:
        student = model(model.collate([self.texts[i] for i in batch.questions]))
        teacher = torch.from_numpy(np.asarray(self.teacher[batch.questions], dtype=np.float32))
        loss = self.loss(student, teacher)
        if batch.pairs and self.pairs_loss is not None:
            a = model(model.collate([p.anchor for p in batch.pairs]))
            b = model(model.collate([p.positive for p in batch.pairs]))
            loss = loss + self.pairs_weight * self.pairs_loss(a, b)
        return loss

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """Agreement with the teacher on the held-out rows: MRR@20 of each row's teacher nearest
        neighbour in the student's ranking (``mrr@20``) and the share of the teacher's top 10 in
        the student's top 10 (``teacher_recall@10``); both among held-out rows, self excluded."""
        from hybrid_qpr.model.losses.sdml import squared_distances
        from hybrid_qpr.training.cnn import embed

        rows = self.val_rows
        if len(rows) < 12:
            raise ConfigError("teacher-agreement validation needs >= 12 held-out questions")
        student = torch.from_numpy(embed(model, [self.texts[i] for i in rows]))
        teacher = torch.from_numpy(np.asarray(self.teacher[rows], dtype=np.float32))
        eye = torch.eye(len(rows), dtype=torch.bool)
        t_top = (teacher @ teacher.T).masked_fill(eye, float("-inf")).topk(10, dim=1).indices
        s_rank = (-squared_distances(student, student)).masked_fill(eye, float("-inf")).topk(20, dim=1).indices
        hit = s_rank == t_top[:, :1]
        first = torch.where(hit.any(1), hit.float().argmax(1) + 1, torch.zeros(len(rows), dtype=torch.long))
        mrr = torch.where(first > 0, 1.0 / first.clamp_min(1).float(), torch.zeros(len(rows))).mean()
        overlap = (s_rank[:, :10, None] == t_top[:, None, :]).any(2).float().sum(1) / 10
        return {"mrr@20": float(mrr), "teacher_recall@10": float(overlap.mean())}


@dataclass
class DistillConfig:
    """Settings of ``distill`` beyond the trainer's (``TrainConfig``)."""

    teacher_temperature: float = 0.05
    group_size: int = 8  # teacher-neighbour group per batch slot; 1 = random batches
    neighbours: int = 32  # teacher neighbours computed per question (group_size - 1 are used)
    pairs_weight: float = 1.0
    pairs_epsilon: float = 0.3
    held_out: int = 2000  # questions held out for teacher-agreement validation (no labelled val split)
    vocab: int = 30_000
    hash_bins: int = 5000
    architecture: dict | None = None  # CNNModel settings; default below
    teacher_words: bool = True  # add the teacher's words and start word embeddings from it (word_init)


DEFAULT_ARCHITECTURE = {"embedding_dim": 128, "channels": 256, "dim": 256, "layers": 1}  # the committed CNN's: ~13k questions/s


def distill(corpus: str | Path, teacher_dir: str | Path, run_dir: str | Path, *, pairs: str | Path | None = None,
            init: str | Path | None = None, config: DistillConfig = DistillConfig(), train_config=None,
            teacher_cache: str | Path | None = None, resume: bool = False, show_progress: bool = True, on_epoch=None):
    """Distil the teacher encoder in ``teacher_dir`` into a CNN trained in ``run_dir``.

    ``corpus``: questions (see ``load_questions``); ``pairs``: a dataset directory whose train
    clusters add the SDML term and whose val split is used for validation (a dataset given as
    ``corpus`` also lends its val split); with no labelled val split, ``config.held_out``
    corpus questions are held out and validation measures agreement with the teacher.
    ``init``: a run directory (``hybrid-qpr train``/``distill``) whose best model (and
    vocabulary) the student starts from, e.g. to adapt a Quora model to your own questions.
    Teacher vectors are cached in ``teacher_cache`` (default ``run_dir/teacher``).
    ``on_epoch`` gets each epoch's summary (as in the trainer). Returns the trainer's ``TrainResult``; export ``run_dir`` with ``hybrid-qpr export --kind cnn``.
    """
    import json

    from hybrid_qpr.artifacts import load_checkpoint
    from hybrid_qpr.data.splits import load_split
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.model.cnn import CNNModel
    from hybrid_qpr.model.losses import SDMLLoss
    from hybrid_qpr.model.losses.distillation import InBatchDistillationLoss
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.cnn import BEST, CHECKPOINT, RUN_META, TrainConfig, train, write_run_meta
    from hybrid_qpr.training.teacher import corpus_fingerprint, teacher_embeddings
    from hybrid_qpr.training.word_init import extend_vocabulary, init_word_embeddings, teacher_words

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    train_config = train_config or TrainConfig()
    texts = load_questions(corpus)
    encoder = Encoder.load(teacher_dir)
    cache_dir = Path(teacher_cache) if teacher_cache else run_dir / "teacher"
    teacher = teacher_embeddings(encoder, texts, cache_dir, show_progress=show_progress)

    pair_clusters = load_split(pairs, "train") if pairs else None
    labelled = pairs or (corpus if Path(corpus, "manifest.json").is_file() else None)
    val_clusters = load_split(labelled, "val") if labelled else None
    rng = random.Random(train_config.seed)
    rows = list(range(len(texts)))
    val_rows: list[int] = []
    if val_clusters is None:
        held = min(config.held_out, len(texts) // 5)
        val_rows = sorted(rng.sample(rows, held))
        rows = sorted(set(rows) - set(val_rows))

    vocab_path = run_dir / "tokenizer.json"
    if init is not None:
        init = Path(init)
        architecture = json.loads((init / RUN_META).read_text(encoding="utf-8"))["architecture"]
        vocabulary = Vocabulary.load(init / "tokenizer.json")
    else:
        architecture = dict(config.architecture or DEFAULT_ARCHITECTURE)
        if resume and vocab_path.exists():
            vocabulary = Vocabulary.load(vocab_path)
        else:
            vocabulary = Vocabulary.build([texts[i] for i in rows] + [q.text for c in pair_clusters or [] for q in c.questions],
                                          top_words=config.vocab, hash_bins=config.hash_bins)
            if config.teacher_words:
                vocabulary = extend_vocabulary(vocabulary, teacher_words(teacher_dir))
    vocabulary.save(vocab_path)
    torch.manual_seed(train_config.seed)
    model = CNNModel(vocabulary, **architecture)
    fresh = not (resume and (run_dir / CHECKPOINT).exists())
    if init is not None and fresh:
        model.load_state_dict(load_checkpoint(init / BEST, "is --init a 'hybrid-qpr train' or 'distill' run directory?")["model"])
    elif config.teacher_words and fresh:
        log.info("teacher words: %d word embeddings start from the teacher", init_word_embeddings(model, encoder))

    loss = InBatchDistillationLoss(config.teacher_temperature)
    neighbours = None
    if config.group_size > 1:
        key = f"{corpus_fingerprint(texts)}-{encoder.fingerprint}-k{config.neighbours}"
        log.info("teacher: %d nearest neighbours of %d questions (HNSW)", config.neighbours, len(texts))
        neighbours = teacher_neighbours(teacher, config.neighbours, cache_dir / f"neighbours-{key}.npy")
    source = DistillationSource(texts, teacher, loss, batch_size=train_config.batch_size, train_rows=rows,
                                neighbours=neighbours, group_size=config.group_size, pairs=pair_clusters,
                                pairs_loss=SDMLLoss(config.pairs_epsilon) if pair_clusters else None,
                                pairs_weight=config.pairs_weight, val_rows=val_rows)
    options = {"teacher": recorded_path(teacher_dir), "teacher_fingerprint": encoder.fingerprint,
               "corpus": recorded_path(corpus),
               "corpus_questions": len(texts), "teacher_temperature": config.teacher_temperature,
               "group_size": config.group_size, "pairs": recorded_path(pairs) if pairs else None,
               "pairs_weight": config.pairs_weight if pairs else 0.0, "init": recorded_path(init) if init else None,
               "teacher_words": config.teacher_words and init is None,
               "validation": "labelled val split" if val_clusters is not None else f"teacher agreement on {len(val_rows)} held-out questions"}
    write_run_meta(run_dir, architecture=architecture, loss="distill", loss_options=options, loss_fn=loss,
                   dataset_dir=labelled or corpus)
    return train(model, loss, pair_clusters or [], val_clusters, run_dir, train_config, resume=resume,
                 show_progress=show_progress, on_epoch=on_epoch, source=source)
