"""Train a cross-encoder reranker (``hybrid_qpr.model.cross_encoder``) with the generic trainer.

Training examples are (question, correct texts, wrong texts):

* **answer datasets** (written by ``hybrid-qpr dataset from-answers`` / ``from-squad``): each train
  question, its correct sentences and its labelled wrong candidates (WikiQA, TrecQA) or the
  other sentences of its paragraph (SQuAD), which are hard negatives by construction; with
  ``mine_answers``, also the wrong sentences our own first stage ranks highest over all of the
  dataset's train sentences (``hybrid_qpr.training.hard_negatives.mine_answer_negatives``);
* **question clusters** (``hybrid-qpr dataset build``): a cluster's first question, its other
  questions as the correct texts, and hard negatives mined by our own search
  (``hybrid_qpr.training.hard_negatives``: the top BM25 and kNN hits outside the cluster).

Each step draws ``batch_size`` examples (seeded by step, so a resumed run sees the same batches)
and for each one correct text and ``negatives`` wrong ones, topped up from the other examples'
texts when a question has fewer: a group of ``1 + negatives`` pairs per question. Losses:

* ``listwise``: softmax cross-entropy over each group, the correct text as the target class
  (the "localized contrastive estimation" of Gao et al. 2021 with a single positive);
* ``bce``: binary cross-entropy of every pair's logit against its 0/1 label (monoBERT,
  Nogueira and Cho 2019), on the same pairs;
* ``listwise+bce``: their sum (the softmax orders a group, the BCE term anchors each logit).

Step cost: ``precision="bf16"`` runs forward and backward under CPU autocast (matrix products
in bfloat16, which CPUs with AMX or AVX512-BF16 run several times faster; weights, optimizer
state and the loss stay fp32); ``length_buckets`` scores a step's pairs in length-sorted chunks
(``CrossEncoder.score_pairs``). Both leave the dev evaluation in fp32.

**Distillation** (``teacher``): the student starts as the teacher (a trained cross-encoder
directory) cut to ``layers``, the teacher's transformer layers kept in order (e.g. 0,2,4 of 6),
with its embeddings and scoring head. Each step adds to the label loss ``distill_weight`` x
T^2 x KL(softmax(teacher / T) || softmax(student / T)) over each group (the listwise
distillation of Hinton et al. 2015 on the groups above); the teacher scores the same batch in
eval mode, without gradients. ``layers`` without a teacher cuts the base model the same way.

Dev metric (``--dev``), computed by ``hybrid_qpr.evaluation.metrics``: for an answer dataset's val
split (e.g. WikiQA dev), MAP of each dev question's own candidates ranked by the model; for a
paraphrase dataset's val split, MRR@20 of re-ranking a first stage's top 20 for each sampled
cluster's first question (BM25 and kNN hits over all the split's questions, interleaved, by
``hybrid_qpr.training.hard_negatives``; the question's own cluster is relevant).
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

from hybrid_qpr.errors import ConfigError, check_at_least
from hybrid_qpr.training.choices import PRECISIONS, RERANKER_LOSSES, Precision, RerankerLoss
from hybrid_qpr.training.trainer import Trainer, TrainerSettings

logger = logging.getLogger(__name__)

LOSSES = RERANKER_LOSSES
MODEL_SUBDIR = "model"


@dataclass(frozen=True)
class RerankerSettings:
    loss: RerankerLoss = "listwise"
    base_model: str | None = None  # None: the bundled all-MiniLM-L6-v2
    pooling: str = "segments"
    max_length: int = 128
    query_tokens: int = 48
    batch_size: int = 4  # questions per step
    negatives: int = 7  # wrong texts per question
    max_clusters: int | None = 2000  # question clusters used per cluster dataset (seeded sample)
    mine_depth: int = 10  # hits per retriever searched for hard negatives of a cluster (or question)
    mine_answers: bool = False  # answer datasets: add negatives mined over all their train sentences
    miner_model: str | None = None  # encoder for mining kNN negatives; None: the bundled default
    teacher: str | None = None  # a trained cross-encoder directory: distil it (module docstring)
    layers: tuple[int, ...] | None = None  # transformer layers of the teacher (or base) kept; None = all
    distill_weight: float = 1.0
    temperature: float = 1.0
    dev_max_questions: int | None = None  # dev questions evaluated (seeded sample), None = all
    # step cost (docs/training.md, "Step cost"): bf16 autocast of forward and backward (weights
    # and optimizer stay fp32), and a step's pairs scored in length-sorted chunks
    precision: Precision = "fp32"
    length_buckets: int = 1

    def check(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"loss={self.loss!r}: allowed values are {', '.join(LOSSES)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision={self.precision!r}: allowed values are {', '.join(PRECISIONS)}")
        check_at_least(self, ("batch_size", "negatives", "max_length", "query_tokens", "mine_depth",
                              "length_buckets"))
        self._check_student()

    def _check_student(self) -> None:
        if self.teacher is not None and self.base_model is not None:
            raise ConfigError("give --teacher or --base-model, not both: a student starts from its teacher's layers")
        if self.temperature <= 0 or self.distill_weight < 0:
            raise ConfigError(f"temperature={self.temperature} must be > 0 and distill_weight="
                              f"{self.distill_weight} >= 0")
        layers = self.layers
        if layers is not None and (not layers or list(layers) != sorted(set(layers)) or layers[0] < 0):
            raise ConfigError(f"layers={','.join(map(str, layers))}: give distinct layer numbers "
                              "in increasing order, from 0")


@dataclass
class Example:
    query: str
    positives: list[str]
    negatives: list[str]


def _manifest_format(dataset_dir: Path) -> str | None:
    try:
        return json.loads((dataset_dir / "manifest.json").read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        return None


def load_examples(dataset_dirs: Sequence[str | Path], settings: RerankerSettings, seed: int) -> list[Example]:
    """The train examples of every dataset (module docstring). A dataset named ``n`` times is read
    (and mined) once and its examples listed ``n`` times, so batches draw it ``n`` times as often:
    how a small set (SemEval's 61 train questions beside thousands of clusters) gets a share."""
    from collections import Counter

    from hybrid_qpr.data.answer_dataset import FORMAT as ANSWERS_FORMAT, read_answer_records

    examples: list[Example] = []
    for directory, times in Counter(map(Path, dataset_dirs)).items():
        if _manifest_format(directory) == ANSWERS_FORMAT:
            found = [Example(r.question, list(r.positives), list(r.negatives))
                     for r in read_answer_records(directory, "train") if r.positives]
            if settings.mine_answers:
                _add_mined_negatives(found, settings)
        else:  # question clusters ('dataset build'); load_split names a directory that is neither
            from hybrid_qpr.training.hard_negatives import mine_cluster_examples

            found = [Example(q, p, n) for q, p, n in mine_cluster_examples(directory, settings.max_clusters, seed,
                                                                          settings.mine_depth, settings.miner_model)]
        logger.info("%s: %d train examples%s", directory, len(found), f", drawn {times} times as often" if times > 1 else "")
        examples.extend(found * times)
    if len(examples) < 2:
        raise ConfigError("the reranker needs at least 2 train questions with a correct text")
    return examples


def _add_mined_negatives(examples: list[Example], settings: RerankerSettings) -> None:
    """Append to each example's negatives the wrong sentences a first stage ranks highest for it
    over all the examples' sentences (labelled ones first; no sentence twice)."""
    from hybrid_qpr.training.hard_negatives import mine_answer_negatives

    texts = list(dict.fromkeys(t for e in examples for t in e.positives + e.negatives))
    mined = mine_answer_negatives([e.query for e in examples], [e.positives for e in examples], texts,
                                  settings.mine_depth, settings.miner_model)
    for example, extra in zip(examples, mined):
        known = set(example.negatives)
        example.negatives.extend(t for t in extra if t not in known)


def draw_groups(examples: Sequence[Example], settings: RerankerSettings, seed: int,
                step: int) -> tuple[list[str], list[str]]:
    """Batch ``step``: ``batch_size`` groups of ``1 + negatives`` (question, text) pairs, the
    correct text first in each group; depends only on its arguments."""
    rng = random.Random(f"{seed}:{step}")
    chosen = rng.sample(range(len(examples)), min(settings.batch_size, len(examples)))
    queries, texts = [], []
    for index in chosen:
        example = examples[index]
        wrong = rng.sample(example.negatives, min(settings.negatives, len(example.negatives)))
        while len(wrong) < settings.negatives:  # top up with another question's text
            other = examples[rng.randrange(len(examples))]
            if other is not example:
                wrong.append(rng.choice(other.positives + other.negatives))
        queries.extend([example.query] * (1 + settings.negatives))
        texts.extend([rng.choice(example.positives), *wrong])
    return queries, texts


def group_loss(scores: torch.Tensor, group: int, loss: RerankerLoss) -> torch.Tensor:
    """``scores`` [groups * group] with each group's correct pair first."""
    grouped = scores.float().view(-1, group)
    total = grouped.new_zeros(())
    if loss in ("listwise", "listwise+bce"):
        total = total + torch.nn.functional.cross_entropy(grouped, torch.zeros(len(grouped), dtype=torch.long))
    if loss in ("bce", "listwise+bce"):
        labels = torch.zeros_like(grouped)
        labels[:, 0] = 1.0
        total = total + torch.nn.functional.binary_cross_entropy_with_logits(grouped, labels)
    return total


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, group: int, temperature: float) -> torch.Tensor:
    """T^2 x KL(softmax(teacher / T) || softmax(student / T)), averaged over the groups of
    ``group`` pairs (scores [groups * group]); T^2 keeps the gradient scale independent of T."""
    log_student = torch.log_softmax(student.view(-1, group) / temperature, dim=-1)
    log_teacher = torch.log_softmax(teacher.view(-1, group) / temperature, dim=-1)
    kl = torch.nn.functional.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean")
    return kl * temperature**2


def keep_layers(model, layers: Sequence[int] | None):
    """Cut ``model``'s transformer (a BERT-like backbone) to ``layers``, in order; returns it."""
    if layers is None:
        return model
    stack = model.backbone.encoder.layer
    if max(layers) >= len(stack):
        raise ConfigError(f"layers={','.join(map(str, layers))}: the model has {len(stack)} layers (0 to {len(stack) - 1})")
    model.backbone.encoder.layer = torch.nn.ModuleList([stack[i] for i in layers])
    model.backbone.config.num_hidden_layers = len(layers)
    return model


def teacher_dir(path: str | Path) -> Path:
    """A cross-encoder directory: a saved model, or a 'reranker train' run (its ``model/``)."""
    from hybrid_qpr.model.cross_encoder import SETTINGS_FILE

    path = Path(path)
    return path / MODEL_SUBDIR if (path / MODEL_SUBDIR / SETTINGS_FILE).is_file() else path


def build_model(settings: RerankerSettings):
    """The model a run trains: the teacher cut to ``layers`` (it keeps the teacher's head),
    else the base model (cut to ``layers``) with a fresh head."""
    from hybrid_qpr.errors import ArtifactError
    from hybrid_qpr.model.cross_encoder import SETTINGS_FILE, CrossEncoder

    source = None if settings.teacher is None else teacher_dir(settings.teacher)
    if source is not None and not (source / SETTINGS_FILE).is_file():
        raise ArtifactError(f"{settings.teacher}: not a trained cross-encoder (no {SETTINGS_FILE}); --teacher needs "
                            "a 'reranker train' run directory or its model/")
    model = CrossEncoder.from_dir(source if source is not None else settings.base_model,
                                  max_length=settings.max_length, query_tokens=settings.query_tokens,
                                  pooling=settings.pooling)  # type: ignore[arg-type]
    return keep_layers(model, settings.layers)


def cpu_has_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU runs bfloat16 matrix products natively (AVX512-BF16 or AMX flags);
    None where ``cpuinfo`` cannot be read (not Linux). Without them autocast emulates bf16."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"}) if flags else None


def step_function(model, examples: Sequence[Example], settings: RerankerSettings, seed: int, teacher=None):
    """``step(n)``: forward and backward on batch ``n`` (``draw_groups``), returning the loss;
    the trainer's ``step_loss``, and what ``benchmarks/bench_reranker_step.py`` times."""
    group = 1 + settings.negatives
    bf16 = settings.precision == "bf16"

    def step(n: int) -> float:
        queries, texts = draw_groups(examples, settings, seed, n)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            scores = model.score_pairs(queries, texts, settings.length_buckets)
            if teacher is not None:
                with torch.no_grad():
                    target = teacher.score_pairs(queries, texts, settings.length_buckets)
        loss = group_loss(scores, group, settings.loss)
        if teacher is not None:
            loss = loss + settings.distill_weight * distillation_loss(scores.float(), target.float(), group,
                                                                      settings.temperature)
        loss.backward()
        return float(loss.detach())

    return step


def pair_lengths(model, examples: Sequence[Example], limit: int = 2000, seed: int = 0) -> list[int]:
    """Untruncated token counts of a seeded sample of train pairs (question against each of its
    texts), to choose ``max_length`` from the data instead of by habit."""
    rng = random.Random(seed)
    sample = rng.sample(list(examples), min(limit, len(examples)))
    lengths = []
    for example in sample:  # each question tokenized once, against all of its texts
        (question,) = model.pairs.pieces([example.query])
        lengths.extend(3 + len(question) + len(text) for text in model.pairs.pieces(example.positives + example.negatives))
    return lengths


DEV_DEPTH = 20  # first-stage candidates per question of a paraphrase dev set (MRR@20)


@dataclass
class DevSet:
    """What the dev metric ranks: each question's candidates, with the positions of the correct
    ones; ``metric`` is ``dev_map`` (answer sets: all of a question's own candidates) or
    ``dev_mrr20`` (question clusters: a first stage's top 20, module docstring)."""

    metric: str
    items: list[tuple[str, list[str], list[int]]]


@torch.no_grad()
def dev_score(model, dev: DevSet) -> float:
    """The dev metric of ranking each dev question's candidates by the cross-encoder."""
    from hybrid_qpr.evaluation.metrics import average_precision, mrr_at_k

    run, qrels = {}, {}
    for n, (question, candidates, correct) in enumerate(dev.items):
        scores = model.predict([question] * len(candidates), candidates).tolist() if candidates else []
        run[f"q{n}"] = [f"c{i}" for i in sorted(range(len(candidates)), key=lambda i: (-scores[i], i))]
        # a question whose first stage found none of its paraphrases still counts (reciprocal rank 0)
        qrels[f"q{n}"] = {f"c{i}": 1 for i in correct} or {"absent": 1}
    return average_precision(run, qrels) if dev.metric == "dev_map" else mrr_at_k(run, qrels, DEV_DEPTH)


def dev_set(dev_dir: str | Path, settings: RerankerSettings, seed: int) -> DevSet:
    """The val split of an answer dataset (each question's own candidates, MAP) or of a
    paraphrase dataset (a seeded sample of its clusters' first questions, each with the top
    ``DEV_DEPTH`` BM25 and kNN hits over the split's questions, MRR@20)."""
    from hybrid_qpr.data.answer_dataset import FORMAT as ANSWERS_FORMAT, read_answer_records

    if _manifest_format(Path(dev_dir)) != ANSWERS_FORMAT:
        from hybrid_qpr.training.hard_negatives import cluster_candidates

        return DevSet("dev_mrr20", cluster_candidates(dev_dir, "val", settings.dev_max_questions, seed, DEV_DEPTH,
                                                      settings.miner_model))
    records = [r for r in read_answer_records(dev_dir, "val") if r.positives]
    if not records:
        raise ConfigError(f"{dev_dir}: the val split has no question with a correct sentence to evaluate on")
    if settings.dev_max_questions is not None and settings.dev_max_questions < len(records):
        records = random.Random(seed).sample(records, settings.dev_max_questions)
    return DevSet("dev_map", [(r.question, r.positives + r.negatives, list(range(len(r.positives)))) for r in records])


def dev_evaluation(model, dev_dirs: Sequence[str | Path], devs: Sequence[DevSet]):
    """The trainer's ``evaluate`` and the metric that decides (``trainer.dev_metrics``): one dev
    set's metric, or each set's (``dev_map:wikiqa``, ...) and their mean. No dev set: no evaluation."""
    from hybrid_qpr.training.trainer import dev_metrics

    evaluate, metric = dev_metrics([(f"{dev.metric}:{Path(path).name}", functools.partial(dev_score, model, dev))
                                    for path, dev in zip(dev_dirs, devs)])
    return evaluate, metric or "dev_map"


def train_reranker(dataset_dirs: Sequence[str | Path], dev_dir: str | Path | Sequence[str | Path] | None, out_dir: str | Path,
                   settings: RerankerSettings, trainer: TrainerSettings, *, resume: bool = False,
                   export_dir: str | Path | None = None, quantize: bool = False,
                   show_progress: bool = True) -> dict[str, Any]:
    """Train, keep the best dev state, save ``out_dir/model`` and optionally export it.
    ``dev_dir``: one dataset or several (their metrics' mean decides, ``dev_evaluation``)."""
    from hybrid_qpr.model.cross_encoder import CrossEncoder

    settings.check()
    trainer.check()
    if settings.precision == "bf16" and cpu_has_bf16() is False:
        logger.warning("this CPU has neither AVX512-BF16 nor AMX: bf16 autocast is emulated here and far slower than "
                       "fp32 (docs/training.md, 'Step cost'); --precision fp32 is the faster choice on it")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(trainer.seed)
    examples = load_examples(dataset_dirs, settings, trainer.seed)
    dev_dirs = [] if dev_dir is None else [dev_dir] if isinstance(dev_dir, (str, Path)) else list(dev_dir)
    devs = [dev_set(path, settings, trainer.seed) for path in dev_dirs]
    model = build_model(settings)
    teacher = None
    if settings.teacher is not None:
        teacher = CrossEncoder.from_dir(teacher_dir(settings.teacher), max_length=settings.max_length,
                                        query_tokens=settings.query_tokens, pooling=settings.pooling)  # type: ignore[arg-type]
        teacher.eval().requires_grad_(False)
    step_loss = step_function(model, examples, settings, trainer.seed, teacher)
    evaluate, metric = dev_evaluation(model, dev_dirs, devs)  # a repeated dev set is refused before any file

    recorded_dev = [str(d) for d in dev_dirs]  # one set recorded as a string, as runs have always had it
    run_settings = {**dataclasses.asdict(settings), **dataclasses.asdict(trainer),
                    "datasets": [str(d) for d in dataset_dirs],
                    "dev": recorded_dev[0] if len(recorded_dev) == 1 else recorded_dev or None}
    (out_dir / "settings.json").write_text(json.dumps(run_settings, indent=2) + "\n")
    loop = Trainer(model, trainer, out_dir, step_loss=step_loss, evaluate=evaluate, run_settings=run_settings,
                   defaults={**dataclasses.asdict(RerankerSettings()), **dataclasses.asdict(TrainerSettings())},
                   description=f"reranker {settings.loss}", metric=metric)
    result = loop.run(resume=resume, show_progress=show_progress)
    report = {**result.to_dict(), "train_examples": len(examples), "dev_questions": sum(len(dev.items) for dev in devs)}
    training = {**run_settings, "report": {k: v for k, v in report.items() if k != "history"}}
    model.save(out_dir / MODEL_SUBDIR, extra={"training": training})
    if export_dir is not None:
        from hybrid_qpr.export.cross_encoder import export_cross_encoder

        export_cross_encoder(model, export_dir, quantize=quantize, training=training)
        report["export"] = str(export_dir)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def load_run_checkpoint(run_dir: str | Path, which: str = "best"):
    """The cross-encoder of a ``reranker train`` run's ``best.pt`` (or last ``checkpoint.pt``),
    which may still be training, rebuilt from the run's ``settings.json``; with the training
    record an export or a saved model carries (settings, ``checkpoint``, ``step``)."""
    from hybrid_qpr.artifacts import load_checkpoint
    from hybrid_qpr.errors import ArtifactError
    from hybrid_qpr.training.trainer import BEST_FILE, CHECKPOINT_FILE

    run_dir = Path(run_dir)
    path = run_dir / (BEST_FILE if which == "best" else CHECKPOINT_FILE)
    try:
        settings = json.loads((run_dir / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{run_dir / 'settings.json'}: missing or not JSON; is {run_dir} a "
                            "'hybrid-qpr reranker train' run directory?") from exc
    state = load_checkpoint(path, "train the run again with 'hybrid-qpr reranker train'")
    fields = {f.name for f in dataclasses.fields(RerankerSettings)}
    run = RerankerSettings(**{k: v for k, v in settings.items() if k in fields})
    model = build_model(dataclasses.replace(run, layers=None if run.layers is None else tuple(run.layers)))
    model.load_state_dict(state["model"])
    return model, {**settings, "checkpoint": which, "step": int(state["step"])}


def export_run_checkpoint(run_dir: str | Path, out_dir: str | Path, which: str = "best", *,
                          quantize: bool = False, per_channel: bool = False, graph: str | None = None) -> dict[str, Any]:
    """Export the ``best.pt`` (or last ``checkpoint.pt``) of a ``reranker train`` run (``load_run_checkpoint``)."""
    from hybrid_qpr.export.cross_encoder import export_cross_encoder

    model, training = load_run_checkpoint(run_dir, which)
    return export_cross_encoder(model, out_dir, quantize=quantize, per_channel=per_channel, graph=graph,
                                training=training)
