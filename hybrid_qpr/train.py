"""Training loop for any question encoder (the SDML CNN, or another nn.Module with ``collate``).

The encoder is an ``nn.Module`` with ``collate(texts) -> tensor`` and ``forward(tensor) -> [N, d]``.
Each epoch draws one random pair of distinct questions from every training cluster with >= 2
questions, shuffles the clusters and cuts them into batches of N: a cluster appears once per
epoch, so a batch never holds two pairs from one cluster (they would be false negatives for
in-batch losses). Adam (lr 1e-3). After each epoch the validation MRR@20 (and ROC AUC of
positive vs random pairs) is measured; the best state is checkpointed atomically and training
stops after ``patience`` epochs without improvement. ``resume=True`` continues from the
checkpoint in ``run_dir``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from hybrid_qpr.data.clusters import Cluster
from hybrid_qpr.evaluation.metrics import drop_self, mrr_at_k, roc_auc

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
BEST = "best.pt"


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


def epoch_batches(clusters: Sequence[Cluster], batch_size: int, rng: random.Random) -> list[list[tuple[str, str]]]:
    """One pair per cluster (>= 2 questions), shuffled, cut into batches: no cluster twice in a batch."""
    pairs = []
    for cluster in clusters:
        if len(cluster.questions) >= 2:
            a, b = rng.sample(cluster.questions, 2)
            pairs.append((a.text, b.text))
    rng.shuffle(pairs)
    return [pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size) if len(pairs[i : i + batch_size]) >= 2]


@torch.no_grad()
def embed(model: nn.Module, texts: Sequence[str], batch_size: int = 1024) -> np.ndarray:
    model.eval()
    out = [model(model.collate(texts[i : i + batch_size])).numpy() for i in range(0, len(texts), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def validate(model: nn.Module, clusters: Sequence[Cluster], max_queries: int, seed: int) -> dict[str, float]:
    """MRR@20 with every val question as corpus (self dropped) and ROC AUC of pair scores."""
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
    sq = (vectors**2).sum(1)
    run, qrels, scores, labels = {}, {}, [], []
    for i in picked:
        d = sq + sq[i] - 2 * vectors @ vectors[i]
        top = np.argsort(d)[:21]
        run[ids[i]] = [ids[j] for j in top]
        qrels[ids[i]] = {q.id: 1 for q in owner[ids[i]].questions if q.id != ids[i]}
        pos = index[next(iter(qrels[ids[i]]))]
        neg = int(rng.integers(len(ids)))
        scores += [-d[pos], -d[neg]]
        labels += [1, int(owner[ids[neg]] is owner[ids[i]])]
    run = drop_self(run)
    return {"mrr@20": mrr_at_k(run, qrels, 20), "roc_auc": roc_auc(scores, labels) if len(set(labels)) == 2 else float("nan")}


def _save(obj: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train(
    model: nn.Module,
    loss_fn: nn.Module,
    train_clusters: Sequence[Cluster],
    val_clusters: Sequence[Cluster],
    run_dir: str | Path,
    config: TrainConfig = TrainConfig(),
    resume: bool = False,
    show_progress: bool = True,
) -> TrainResult:
    """Train ``model`` with ``loss_fn(anchors, positives)``; keep the best state in ``run_dir/best.pt``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    start_epoch, history, best_mrr, best_epoch = 0, [], -1.0, -1
    if resume and (run_dir / CHECKPOINT).exists():
        state = torch.load(run_dir / CHECKPOINT, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, history, best_mrr, best_epoch = state["epoch"] + 1, state["history"], state["best_mrr"], state["best_epoch"]
        log.info("resumed from %s at epoch %d", run_dir / CHECKPOINT, start_epoch)
    started = time.monotonic()
    for epoch in range(start_epoch, config.epochs):
        rng = random.Random(config.seed * 1000 + epoch)
        batches = epoch_batches(train_clusters, config.batch_size, rng)
        model.train()
        t0, total = time.monotonic(), 0.0
        for step, batch in enumerate(batches):
            a = model(model.collate([p[0] for p in batch]))
            b = model(model.collate([p[1] for p in batch]))
            loss = loss_fn(a, b)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            if show_progress and step % 10 == 0:
                log.info("epoch %d step %d/%d loss %.4f", epoch, step, len(batches), float(loss))
        seconds = time.monotonic() - t0
        metrics = validate(model, val_clusters, config.val_queries, config.seed)
        entry = {"epoch": epoch, "loss": total / max(1, len(batches)), "epoch_seconds": seconds, **metrics}
        history.append(entry)
        if show_progress:
            print(json.dumps(entry), flush=True)
        if metrics["mrr@20"] > best_mrr:
            best_mrr, best_epoch = metrics["mrr@20"], epoch
            _save({"model": model.state_dict(), "epoch": epoch, "metrics": metrics}, run_dir / BEST)
        _save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "history": history,
               "best_mrr": best_mrr, "best_epoch": best_epoch, "config": asdict(config)}, run_dir / CHECKPOINT)
        if epoch - best_epoch >= config.patience:
            break
        if config.max_minutes is not None and time.monotonic() - started > 60 * config.max_minutes:
            break
    return TrainResult(best_epoch, best_mrr, history)
