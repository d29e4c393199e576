"""ASBERT: fine-tune a pretrained transformer for answer selection on question -> correct sentence pairs.

Shonibare, "ASBERT: Siamese and Triplet network embedding for open question answering",
arXiv:2104.08558 (2021). Recipe followed: one shared (siamese) pretrained encoder with mean
pooling (``hybrid_qpr.model.transformer``), texts cut at ``max_length`` = 128 tokens, AdamW
with linear warm-up then linear decay, gradient norm clipped at 1, and early stopping on the
dev MAP. Objectives (``hybrid_qpr.model.losses.labelled_negatives``): triplet with a margin
and hard or semi-hard negatives taken from the question's labelled wrong candidates as well
as in-batch; siamese (binary cross-entropy on the cosine); and SDML as a third loss.

Batches: each step draws ``batch_size`` distinct train questions (seeded by step, so a
resumed run sees the same batches), one correct sentence of each and up to
``negatives_per_question`` of its labelled wrong sentences.

Training is the one trainer's (``hybrid_qpr.training.trainer``). Dev MAP: on the untrained
state, every ``eval_every`` steps, at the last step and when ``max_minutes`` runs out, the model
(eval mode) ranks each dev question's own candidates by its similarity (cosine, or −squared L2
when not normalised) and MAP is computed with ``hybrid_qpr.evaluation.metrics``; with several dev sets
each set's MAP is reported and their mean decides (``trainer.dev_metrics``). The best state
is kept (``best.pt``) and training stops after ``patience`` evaluations without a gain. A
checkpoint is written with each evaluation; ``resume=True`` continues it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hybrid_qpr.artifacts import recorded_path
from hybrid_qpr.errors import ConfigError, check_at_least
from hybrid_qpr.model.choices import LABELLED_NEGATIVES
from hybrid_qpr.training.choices import ASBERT_LOSSES, AsbertLoss
from hybrid_qpr.training.trainer import TrainerSettings

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class AsbertSettings:
    loss: AsbertLoss = "triplet"
    base_model: str | None = None  # None: the bundled all-MiniLM-L6-v2
    max_length: int = 128
    batch_size: int = 16
    negatives_per_question: int = 1
    steps: int = 300
    lr: float = 2e-5
    warmup: float = 0.1
    margin: float = 1.0
    negatives: str = "hard"  # triplet: hard or semi-hard
    epsilon: float = 0.3
    normalize: bool | None = None  # None: True for triplet and siamese, False for sdml
    eval_every: int = 50
    patience: int = 3
    max_minutes: float | None = None
    seed: int = 0

    def check(self) -> None:
        if self.loss not in ASBERT_LOSSES:
            raise ConfigError(f"loss={self.loss!r}: allowed values are {', '.join(ASBERT_LOSSES)}")
        check_at_least(self, ("max_length", "batch_size", "steps", "eval_every", "patience"))
        if self.negatives_per_question < 0:
            raise ConfigError(f"negatives_per_question={self.negatives_per_question}: must be >= 0")
        if self.negatives not in LABELLED_NEGATIVES:
            raise ConfigError(f"negatives={self.negatives!r}: allowed values are hard, semi-hard")

    def trainer_settings(self) -> TrainerSettings:
        """AdamW with linear warm-up then decay, gradient norm clipped at 1, dev MAP every
        ``eval_every`` steps (a checkpoint with each)."""
        return TrainerSettings(steps=self.steps, lr=self.lr, warmup=self.warmup, clip=1.0, eval_every=self.eval_every,
                               patience=self.patience, checkpoint_every=self.eval_every, max_minutes=self.max_minutes,
                               seed=self.seed)

    @property
    def normalized(self) -> bool:
        return self.loss != "sdml" if self.normalize is None else self.normalize


def build_loss(settings: AsbertSettings) -> torch.nn.Module:
    """The loss from the one registry (``hybrid_qpr.model.losses``): its labelled-negatives kind."""
    from hybrid_qpr.model.losses import build_loss as build_registered_loss

    return build_registered_loss(f"{settings.loss}-negatives", epsilon=settings.epsilon,  # type: ignore[arg-type]
                                 margin=settings.margin, negatives=settings.negatives)


def draw_batch(records, settings: AsbertSettings, step: int) -> tuple[list[str], list[str], list[str], list[int]]:
    """(questions, one correct sentence each, labelled wrong sentences, owner row of each)."""
    rng = random.Random(f"{settings.seed}:{step}")
    questions, positives, negatives, owner = [], [], [], []
    for row, index in enumerate(rng.sample(range(len(records)), min(settings.batch_size, len(records)))):
        record = records[index]
        questions.append(record.question)
        positives.append(rng.choice(record.positives))
        for wrong in rng.sample(record.negatives, min(settings.negatives_per_question, len(record.negatives))):
            negatives.append(wrong)
            owner.append(row)
    return questions, positives, negatives, owner


@torch.no_grad()
def dev_map(model, records) -> float:
    """MAP of ranking each dev question's own candidates by the model's similarity."""
    from hybrid_qpr.evaluation.metrics import average_precision
    from hybrid_qpr.model.losses.sdml import squared_distances

    judged = [r for r in records if r.positives]
    run, qrels = {}, {}
    questions = model.encode([r.question for r in judged])
    for r, q in zip(judged, questions):
        candidates = r.positives + r.negatives
        vectors = model.encode(candidates)
        scores = (vectors @ q if model.normalize else -squared_distances(q[None], vectors)[0]).tolist()
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
        run[r.id] = [f"c{i}" for i in order]
        qrels[r.id] = {f"c{i}": 1 for i in range(len(r.positives))}
    return average_precision(run, qrels)


def train_asbert(train_dirs: list[str | Path], dev_dirs: str | Path | Sequence[str | Path], out_dir: str | Path,
                 settings: AsbertSettings, *,
                 export_dir: str | Path | None = None, quantize: bool = False, resume: bool = False,
                 show_progress: bool = True) -> dict[str, Any]:
    """Fine-tune with the one trainer (``hybrid_qpr.training.trainer``), keep the best dev-MAP
    state, save ``out_dir/model`` and optionally export it; ``resume`` continues ``checkpoint.pt``.
    ``dev_dirs``: one answer dataset or several (the mean of their dev MAPs decides)."""
    from hybrid_qpr.data.answer_dataset import read_answer_records
    from hybrid_qpr.model.transformer import TransformerEmbedder
    from hybrid_qpr.training.trainer import Trainer, dev_metrics

    settings.check()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(settings.seed)
    records = [r for d in train_dirs for r in read_answer_records(d, "train") if r.positives]
    dev_dirs = [dev_dirs] if isinstance(dev_dirs, (str, Path)) else list(dev_dirs)
    if not dev_dirs:
        raise ConfigError("ASBERT needs at least one dev dataset (--dev) for early stopping")
    devs = [(f"dev_map:{Path(d).name}", read_answer_records(d, "val")) for d in dev_dirs]
    if len(records) < 2:
        raise ConfigError("ASBERT needs at least 2 train questions with a correct sentence")
    model = TransformerEmbedder.from_dir(settings.base_model, max_length=settings.max_length,
                                         normalize=settings.normalized)
    loss_fn = build_loss(settings)
    evaluate, metric = dev_metrics([(name, functools.partial(dev_map, model, records)) for name, records in devs])
    (out_dir / "settings.json").write_text(json.dumps(dataclasses.asdict(settings), indent=2) + "\n")

    def step_loss(step: int) -> float:
        questions, positives, negatives, owner = draw_batch(records, settings, step)
        vectors = model(model.collate(questions + positives + negatives))
        n = len(questions)
        loss = loss_fn(vectors[:n], vectors[n:2 * n], vectors[2 * n:], torch.as_tensor(owner, dtype=torch.long))
        loss.backward()
        return float(loss.detach())

    # one dev set is recorded as a path, as runs before several were allowed (their checkpoints resume)
    recorded_dev = str(dev_dirs[0]) if len(dev_dirs) == 1 else [str(d) for d in dev_dirs]
    run_settings = {**dataclasses.asdict(settings), "train": [str(d) for d in train_dirs], "dev": recorded_dev}
    result = Trainer(model, settings.trainer_settings(), out_dir, step_loss=step_loss, evaluate=evaluate,
                     run_settings=run_settings, defaults=dataclasses.asdict(AsbertSettings()),
                     description=f"asbert {settings.loss}", metric=metric).run(resume=resume, show_progress=show_progress)
    reported_dev = [recorded_path(d) for d in dev_dirs]
    report = {"loss": settings.loss, "train_questions": len(records), "best_dev_map": result.best_metric,
              "best_step": result.best_step, "stopped": result.stopped, "seconds": result.seconds,
              "history": result.history, "train": [recorded_path(d) for d in train_dirs],
              "dev": reported_dev[0] if len(reported_dev) == 1 else reported_dev}
    training = {**dataclasses.asdict(settings), "report": {k: v for k, v in report.items() if k != "history"}}
    model.save(out_dir / "model", extra={"training": training})
    if export_dir is not None:
        from hybrid_qpr.export.transformer import export_transformer

        export_transformer(model, export_dir, quantize=quantize, training=training)
        report["export"] = str(export_dir)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
