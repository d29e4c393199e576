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
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from hybrid_qpr.artifacts import recorded_path
from hybrid_qpr.data.clusters import Cluster
from hybrid_qpr.errors import ConfigError, InputError

if TYPE_CHECKING:
    from hybrid_qpr.text.tokenizer import Vocabulary

log = logging.getLogger(__name__)


def _source_texts(path: Path, text_column: str):
    """The texts of one corpus source, in file order (duplicates and blanks included)."""
    import json

    from hybrid_qpr.data.answer_dataset import FORMAT as ANSWERS_FORMAT, read_answer_records
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.data.splits import load_split

    if not path.is_dir():
        return (doc.text for _, doc in iter_documents(path, text_column=text_column))
    manifest = path / "manifest.json"
    if manifest.is_file() and (path / "train.jsonl").is_file():
        if json.loads(manifest.read_text(encoding="utf-8")).get("format") == ANSWERS_FORMAT:
            # an answer set: each train question and its candidate sentences (both are texts users search)
            return (t for r in read_answer_records(path, "train") for t in [r.question, *r.positives, *r.negatives])
        return (q.text for c in load_split(path, "train") for q in c.questions)
    if (path / "corpus.jsonl").is_file():
        return (doc.text for _, doc in iter_documents(path / "corpus.jsonl", fmt="jsonl"))
    raise InputError(path, None, "directory is neither a dataset (manifest.json + train.jsonl) nor BEIR (corpus.jsonl)")


def load_questions(paths: str | Path | Sequence[str | Path], text_column: str = "text", *,
                   max_per_source: int | None = None, seed: int = 13) -> list[str]:
    """Distinct texts, in source then file order, of the corpus (one source or several) to distil on.

    A source is a JSONL/TSV/CSV corpus (read like ``hybrid-qpr ingest``), a BEIR directory (its
    ``corpus.jsonl``), a dataset directory of ``hybrid-qpr dataset build`` (its train split
    only, so val/test questions stay unseen) or an answer set of ``dataset from-answers`` /
    ``from-squad`` (its train questions and their candidate sentences). ``max_per_source`` keeps a
    seeded random sample of that many of each source's new distinct texts (in their file order),
    so one large source does not crowd out the others.
    """
    sources = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if not sources:
        raise ConfigError("no corpus given")
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    for path in sources:
        new = []
        for text in _source_texts(path, text_column):
            if text.strip() and text not in seen:
                seen.add(text)
                new.append(text)
        if max_per_source is not None and len(new) > max_per_source:
            keep = sorted(rng.sample(range(len(new)), max_per_source))
            seen.difference_update(new)  # texts left out may still come from a later source
            new = [new[i] for i in keep]
            seen.update(new)
        out.extend(new)
    if len(out) < 2:
        where = sources[0] if len(sources) == 1 else ", ".join(map(str, sources))
        raise InputError(where, None, f"{len(out)} distinct non-empty questions; distillation needs at least 2")
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
        depth = min(20, len(rows))  # fewer than 20 held-out rows: rank them all
        s_rank = (-squared_distances(student, student)).masked_fill(eye, float("-inf")).topk(depth, dim=1).indices
        hit = s_rank == t_top[:, :1]
        first = torch.where(hit.any(1), hit.float().argmax(1) + 1, torch.zeros(len(rows), dtype=torch.long))
        mrr = torch.where(first > 0, 1.0 / first.clamp_min(1).float(), torch.zeros(len(rows))).mean()
        overlap = (s_rank[:, :10, None] == t_top[:, None, :]).any(2).float().sum(1) / 10
        return {"mrr@20": float(mrr), "teacher_recall@10": float(overlap.mean())}


def _lends_val_split(path: Path) -> bool:
    """A paraphrase dataset directory (not an answer set): its val split can validate."""
    import json

    from hybrid_qpr.data.answer_dataset import FORMAT as ANSWERS_FORMAT

    manifest = path / "manifest.json"
    return manifest.is_file() and json.loads(manifest.read_text(encoding="utf-8")).get("format") != ANSWERS_FORMAT


def load_start(init: Path) -> tuple[dict, Vocabulary, dict]:
    """Architecture, vocabulary and weights to start from: a ``train``/``distill`` run directory
    (its best model) or an exported CNN model directory (``hybrid-qpr export --kind cnn``, e.g.
    the default model, whose ONNX initializers carry the torch parameter names)."""
    import json

    from hybrid_qpr.artifacts import load_checkpoint
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.cnn import BEST, RUN_META

    if (init / RUN_META).is_file():
        architecture = json.loads((init / RUN_META).read_text(encoding="utf-8"))["architecture"]
        state = load_checkpoint(init / BEST, "is --init a 'hybrid-qpr train' or 'distill' run directory?")["model"]
        return architecture, Vocabulary.load(init / "tokenizer.json"), state
    config_file = init / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    if config.get("kind") != "cnn" or not (init / "model.onnx").is_file():
        raise ConfigError(f"--init {init}: neither a train/distill run directory ({RUN_META}) "
                          "nor an exported CNN model directory (config.json kind 'cnn' + model.onnx)")
    import onnx
    from onnx import numpy_helper

    state = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(init / "model.onnx").graph.initializer}
    return dict(config["architecture"]), Vocabulary.load(init / "tokenizer.json"), state


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


def distill(corpus: str | Path | Sequence[str | Path], teacher_dir: str | Path, run_dir: str | Path, *, pairs: str | Path | None = None,
            init: str | Path | None = None, config: DistillConfig = DistillConfig(), train_config=None,
            teacher_cache: str | Path | None = None, resume: bool = False, show_progress: bool = True, on_epoch=None,
            max_per_source: int | None = None):
    """Distil the teacher encoder in ``teacher_dir`` into a CNN trained in ``run_dir``.

    ``corpus``: one source of questions or several (see ``load_questions``; ``max_per_source``
    caps each); ``pairs``: a dataset directory whose train
    clusters add the SDML term and whose val split is used for validation (a dataset given as
    the only ``corpus`` also lends its val split); with no labelled val split, ``config.held_out``
    corpus questions are held out and validation measures agreement with the teacher.
    ``init``: a run directory (``hybrid-qpr train``/``distill``) or an exported CNN model
    directory whose model (and vocabulary) the student starts from (``load_start``), e.g. to
    adapt the default Quora model to your own questions.
    Teacher vectors are cached in ``teacher_cache`` (default ``run_dir/teacher``).
    ``on_epoch`` gets each epoch's summary (as in the trainer). Returns the trainer's ``TrainResult``; export ``run_dir`` with ``hybrid-qpr export --kind cnn``.
    """
    from hybrid_qpr.data.splits import load_split
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.model.cnn import CNNModel
    from hybrid_qpr.model.losses import SDMLLoss
    from hybrid_qpr.model.losses.distillation import InBatchDistillationLoss
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.cnn import CHECKPOINT, TrainConfig, train, write_run_meta
    from hybrid_qpr.training.teacher import corpus_fingerprint, teacher_embeddings
    from hybrid_qpr.training.word_init import extend_vocabulary, init_word_embeddings, teacher_words

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    train_config = train_config or TrainConfig()
    sources = [Path(corpus)] if isinstance(corpus, (str, Path)) else [Path(c) for c in corpus]
    texts = load_questions(sources, max_per_source=max_per_source, seed=train_config.seed)
    encoder = Encoder.load(teacher_dir)
    cache_dir = Path(teacher_cache) if teacher_cache else run_dir / "teacher"
    teacher = teacher_embeddings(encoder, texts, cache_dir, show_progress=show_progress)

    pair_clusters = load_split(pairs, "train") if pairs else None
    labelled = pairs or (sources[0] if len(sources) == 1 and _lends_val_split(sources[0]) else None)
    val_clusters = load_split(labelled, "val") if labelled else None
    rng = random.Random(train_config.seed)
    rows = list(range(len(texts)))
    val_rows: list[int] = []
    if val_clusters is None:
        held = min(config.held_out, len(texts) // 5)
        val_rows = sorted(rng.sample(rows, held))
        rows = sorted(set(rows) - set(val_rows))

    vocab_path = run_dir / "tokenizer.json"
    start = None
    if init is not None:
        init = Path(init)
        architecture, vocabulary, start = load_start(init)
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
        model.load_state_dict(start)
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
               "corpus": recorded_path(sources[0]) if len(sources) == 1 else [recorded_path(c) for c in sources],
               "max_per_source": max_per_source,
               "corpus_questions": len(texts), "teacher_temperature": config.teacher_temperature,
               "group_size": config.group_size, "pairs": recorded_path(pairs) if pairs else None,
               "pairs_weight": config.pairs_weight if pairs else 0.0, "init": recorded_path(init) if init else None,
               "teacher_words": config.teacher_words and init is None,
               "validation": "labelled val split" if val_clusters is not None else f"teacher agreement on {len(val_rows)} held-out questions"}
    write_run_meta(run_dir, architecture=architecture, loss="distill", loss_options=options, loss_fn=loss,
                   dataset_dir=labelled or sources[0])
    return train(model, loss, pair_clusters or [], val_clusters, run_dir, train_config, resume=resume,
                 show_progress=show_progress, on_epoch=on_epoch, source=source)
