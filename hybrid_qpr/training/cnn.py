"""Training loop for any question encoder (the SDML CNN, or another nn.Module with ``collate``).

The encoder is an ``nn.Module`` with ``collate(texts) -> tensor`` and ``forward(tensor) -> [N, d]``.
Each epoch draws one random pair of distinct questions from every training cluster with >= 2
questions, shuffles the clusters and cuts them into batches of N: a cluster appears once per
epoch, so a batch never holds two pairs from one cluster (they would be false negatives for
in-batch losses). The loop is the one trainer's (``hybrid_qpr.training.trainer``, epoch
mode): Adam (AdamW without weight decay, lr 1e-3, constant), no clipping. After each epoch the
validation MRR@20 (and ROC AUC of positive vs random pairs) is measured; the best state goes to
``best.pt`` and training stops after ``patience`` epochs without improvement; ``checkpoint.pt``
is written atomically each epoch and ``resume=True`` continues from it (an older CNN checkpoint
is refused with a one-line message). Epochs are numbered from 0, as they always were.

``source`` replaces the pair batches with another batch source (distillation,
``hybrid_qpr.training.distill.DistillationSource``): ``source.batches(rng)`` gives an epoch's
batches and ``source.step_loss(model, batch)`` a batch's loss; with ``val_clusters=None``
``source.validate(model)`` gives the metrics (its ``mrr@20`` picks the best epoch).

Losses with parameters (MSEM's intent classifier) are optimised together with the model; a
loss that sets ``wants_labels = True`` also gets ``labels=`` (each pair's index into
``train_clusters``). Validation ranks by the loss's ``search_distance`` (squared Euclidean
unless the loss says otherwise, e.g. cosine for MSEM). ``show_progress`` draws a bar per epoch
with the running loss (plain lines off a terminal); each epoch's summary is logged (also to
``log.jsonl``) and given to ``on_epoch`` (the CLI prints it as one JSON line).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from hybrid_qpr.artifacts import recorded_path
from hybrid_qpr.data.clusters import Cluster
from hybrid_qpr.distance import check_distance, similarity
from hybrid_qpr.evaluation.evaluator import top_k_indices
from hybrid_qpr.evaluation.metrics import drop_self, mrr_at_k, roc_auc
from hybrid_qpr.model.losses import search_distance
from hybrid_qpr.training.trainer import BEST_FILE, CHECKPOINT_FILE, TrainerSettings

log = logging.getLogger(__name__)

CHECKPOINT = CHECKPOINT_FILE
BEST = BEST_FILE


@dataclass
class TrainConfig:
    batch_size: int = 512
    lr: float = 1e-3
    epochs: int = 20
    patience: int = 3
    seed: int = 13
    max_minutes: float | None = None
    val_queries: int = 2000


@dataclass
class TrainResult:
    best_epoch: int
    best_val_mrr: float
    history: list[dict] = field(default_factory=list)


class Pair(NamedTuple):
    anchor: str
    positive: str
    cluster: int  # index of the pair's cluster in the training cluster list


def epoch_batches(clusters: Sequence[Cluster], batch_size: int, rng: random.Random) -> list[list[Pair]]:
    """One pair per cluster (>= 2 questions), shuffled, cut into batches: no cluster twice in a batch."""
    pairs = []
    for index, cluster in enumerate(clusters):
        if len(cluster.questions) >= 2:
            a, b = rng.sample(cluster.questions, 2)
            pairs.append(Pair(a.text, b.text, index))
    rng.shuffle(pairs)
    return [pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size) if len(pairs[i : i + batch_size]) >= 2]


@torch.no_grad()
def embed(model: nn.Module, texts: Sequence[str], batch_size: int = 1024) -> np.ndarray:
    model.eval()
    out = [model(model.collate(texts[i : i + batch_size])).numpy() for i in range(0, len(texts), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def validate(model: nn.Module, clusters: Sequence[Cluster], max_queries: int, seed: int,
             distance: str = "sqeuclidean") -> dict[str, float]:
    """MRR@20 with every val question as corpus (self dropped) and ROC AUC of pair scores,
    both scored by ``hybrid_qpr.distance.similarity`` under ``distance``."""
    distance = check_distance(distance)
    ids, texts, owner = [], [], {}
    for c in clusters:
        for q in c.questions:
            ids.append(q.id)
            texts.append(q.text)
            owner[q.id] = c
    vectors = embed(model, texts)
    index = {qid: i for i, qid in enumerate(ids)}
    rng = np.random.default_rng(seed)
    multi = [i for i, qid in enumerate(ids) if len(owner[qid].questions) >= 2]
    picked = rng.choice(multi, size=min(max_queries, len(multi)), replace=False) if multi else []
    run, qrels, scores, labels = {}, {}, [], []
    for start in range(0, len(picked), 256):
        chunk = list(picked[start : start + 256])
        sims = similarity(vectors[chunk], vectors, distance)
        top = top_k_indices(sims, 21)  # 20 after the question itself is dropped
        for row, i in enumerate(chunk):
            s = sims[row]
            run[ids[i]] = [ids[j] for j in top[row]]
            qrels[ids[i]] = {q.id: 1 for q in owner[ids[i]].questions if q.id != ids[i]}
            pos = index[next(iter(qrels[ids[i]]))]
            neg = int(rng.integers(len(ids)))
            scores += [float(s[pos]), float(s[neg])]
            labels += [1, int(owner[ids[neg]] is owner[ids[i]])]
    run = drop_self(run)
    return {"mrr@20": mrr_at_k(run, qrels, 20), "roc_auc": roc_auc(scores, labels) if len(set(labels)) == 2 else float("nan")}


RUN_META = "model.json"


def write_run_meta(run_dir: str | Path, *, architecture: dict, loss: str, loss_options: dict, loss_fn: nn.Module,
                   dataset_dir: str | Path) -> dict:
    """Write ``run_dir/model.json``: what ``hybrid-qpr export`` needs to rebuild and describe the
    model (architecture, loss, the distance it was trained for, the training data's fingerprint
    from the dataset's manifest.json, or null when the directory has no manifest)."""
    manifest = Path(dataset_dir) / "manifest.json"
    fingerprint = json.loads(manifest.read_text(encoding="utf-8")).get("fingerprint") if manifest.is_file() else None
    meta = {"architecture": architecture, "loss": loss, "loss_options": loss_options, "distance": search_distance(loss_fn),
            "dataset": recorded_path(dataset_dir), "data_fingerprint": fingerprint}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / RUN_META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return meta


def prepare_cnn_run(run_dir: str | Path, train_clusters: Sequence[Cluster], vocabulary, *, architecture: dict,
                    loss: str, loss_options: dict, seed: int, dataset_dir: str | Path) -> tuple[nn.Module, nn.Module]:
    """The one set-up of a CNN run, shared by ``hybrid-qpr train`` and the loss benchmark: seed
    torch, build the model on ``vocabulary`` and the loss from the registry, and write what
    ``hybrid-qpr export`` reads back (``tokenizer.json``, ``model.json``). Returns (model, loss)."""
    from hybrid_qpr.encoders import TOKENIZER_FILE
    from hybrid_qpr.model.cnn import CNNModel
    from hybrid_qpr.model.losses import build_loss

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    vocabulary.save(run_dir / TOKENIZER_FILE)
    torch.manual_seed(seed)
    model = CNNModel(vocabulary, **architecture)
    loss_fn = build_loss(loss, dim=architecture["dim"], cluster_sizes=[len(c.questions) for c in train_clusters],  # type: ignore[arg-type]
                         **loss_options)
    write_run_meta(run_dir, architecture=architecture, loss=loss, loss_options=loss_options, loss_fn=loss_fn,
                   dataset_dir=dataset_dir)
    return model, loss_fn


def train(
    model: nn.Module,
    loss_fn: nn.Module,
    train_clusters: Sequence[Cluster],
    val_clusters: Sequence[Cluster] | None,
    run_dir: str | Path,
    config: TrainConfig = TrainConfig(),
    resume: bool = False,
    show_progress: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
    source=None,
) -> TrainResult:
    """Train ``model`` with ``loss_fn(anchors, positives[, labels=])``; keep the best state in ``run_dir/best.pt``.
    Each epoch's entry (loss, seconds, val metrics) is logged and handed to ``on_epoch``.

    The loop is the one trainer's (``hybrid_qpr.training.trainer``) in epoch mode: this
    function supplies the epoch's batches, the step loss and the validation."""
    from hybrid_qpr.training.trainer import Trainer

    wants_labels = bool(getattr(loss_fn, "wants_labels", False))
    distance = search_distance(loss_fn)

    def batches(epoch: int) -> list:
        rng = random.Random(config.seed * 1000 + epoch)
        return source.batches(rng) if source is not None else epoch_batches(train_clusters, config.batch_size, rng)

    def step_loss(batch) -> float:
        if source is not None:
            loss = source.step_loss(model, batch)
        else:
            a = model(model.collate([p.anchor for p in batch]))
            b = model(model.collate([p.positive for p in batch]))
            loss = loss_fn(a, b, labels=torch.tensor([p.cluster for p in batch])) if wants_labels else loss_fn(a, b)
        loss.backward()
        return float(loss.detach())

    def evaluate() -> dict[str, float]:
        if val_clusters is None:
            return source.validate(model)
        return validate(model, val_clusters, config.val_queries, config.seed, distance)

    def report(entry: dict) -> None:
        log.info("epoch %s", json.dumps(entry))
        if on_epoch is not None:
            on_epoch(entry)

    trainer = TrainerSettings(epochs=config.epochs, lr=config.lr, clip=None, patience=config.patience,
                              max_minutes=config.max_minutes, seed=config.seed, schedule="constant", weight_decay=0.0)
    result = Trainer(model, trainer, run_dir, step_loss=step_loss, evaluate=evaluate, batches=batches,
                     also_train={"loss": loss_fn}, evaluate_first=False, first_epoch=0, on_record=report,
                     run_settings=asdict(config), defaults=asdict(TrainConfig()), description="train",
                     metric="mrr@20").run(resume=resume, show_progress=show_progress)
    best = -1.0 if result.best_metric is None else result.best_metric
    return TrainResult(-1 if result.best_epoch is None else result.best_epoch, best, result.history)
