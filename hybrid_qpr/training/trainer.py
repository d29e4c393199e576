"""The one training loop: every model of the package trains through :class:`Trainer`.

A model plugs in functions; the trainer owns everything around them (as sentence-transformers'
one ``fit``; the habit, not the code):

* ``step_loss(item)`` runs forward and backward on one batch and returns its loss (a float, or
  a mapping of floats holding ``"loss"`` whose every entry is averaged into the logs, e.g. a
  loss's separate terms). In **step mode** ``item`` is the batch index, and the batch must be
  drawn from ``(seed, item)`` alone, so a resumed run sees the batches an uninterrupted one would
  have seen. In **epoch mode** (``settings.epochs`` set) ``item`` is one of ``batches(epoch)``,
  the list of batches of one pass over the data, drawn from ``(seed, epoch)`` alone.
* ``evaluate()``, optional: a dev metric, higher is better (a float, or a mapping of metrics in
  which ``metric`` names the one that decides).
* ``run_settings``: every setting of the run as plain values, stored in the checkpoint and
  compared on resume.

The trainer does:

* AdamW (``weight_decay`` 0 makes it Adam) with the ``schedule``: ``"linear"``, warm-up over
  ``warmup * steps`` then linear decay to 0 (:func:`lr_factor`), or ``"constant"``;
* ``accumulate`` batches per optimizer step (step mode): their gradients are summed (the step
  function scales its loss, e.g. by ``1 / accumulate``, and its values are summed); gradient
  caching stays inside a step function (``hybrid_qpr.training.gradcache``);
* the gradient norm clipped at ``clip`` (``None``: no clipping) before each optimizer step;
* ``evaluate`` on the untrained state (unless ``evaluate_first=False``), then every
  ``eval_every`` steps, at the last step and when the time budget runs out (step mode), or
  after every epoch (epoch mode); the best state goes to ``best.pt`` (held in memory when
  ``out_dir`` is None); training stops after ``patience`` evaluations without a gain;
* ``checkpoint.pt`` (model, ``also_train`` modules, optimizer, schedule, position, best so far,
  history; format :data:`CHECKPOINT_FORMAT`) written atomically every ``checkpoint_every`` steps,
  after each evaluation, at the end of each epoch and when stopping; ``resume=True`` continues
  from it (a run that stopped on patience trains no further unless ``patience`` grew),
  refusing a checkpoint made with other settings except the budget ones
  (:data:`BUDGET_SETTINGS`) and one of an older format than the one trainer (step-mode
  checkpoints of ``finetune`` and ``reranker`` from before are still read);
* ``log.jsonl``: one line per logged step (every ``log_every``, the last, the one out of time), per epoch and per
  evaluation; each evaluation or epoch record also goes to ``on_record`` (default: one line on
  stderr); progress: a bar on a terminal, a plain periodic line off one (``hybrid_qpr.progress``);
* ``max_minutes``: stop after the step (step mode) or epoch (epoch mode) that crosses it, with the
  checkpoint written.

At the end the model holds the best evaluated state (the last state without ``evaluate``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hybrid_qpr.errors import ConfigError, check_at_least

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
BEST_FILE = "best.pt"
LOG_FILE = "log.jsonl"
CHECKPOINT_FORMAT = 1  # "trainer" in checkpoint.pt; older checkpoints lack it
# How long to train, not what: these may change when a run is resumed.
BUDGET_SETTINGS = ("steps", "epochs", "patience", "max_minutes", "checkpoint_every", "log_every")
SCHEDULES = ("linear", "constant")
DEFAULT_START_OVER = "start over without --resume"


def adamw(parameters, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW, fused into one kernel where this torch has it for these parameters' device (CPU
    from torch 2.4): the update of a MiniLM's 23M weights then costs about a tenth of a
    reranker step less (docs/training.md, "Step cost"); the same state either way."""
    parameters = list(parameters)
    try:
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):  # older torch: fused needs CUDA
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)


@dataclass(frozen=True)
class TrainerSettings:
    steps: int = 1000
    lr: float = 2e-5
    warmup: float = 0.1  # fraction of steps with a linearly rising learning rate
    clip: float | None = 1.0  # max gradient norm; None: no clipping
    eval_every: int = 100
    patience: int = 5  # evaluations without a better dev metric before stopping
    checkpoint_every: int = 50
    log_every: int = 10
    max_minutes: float | None = None
    seed: int = 0
    epochs: int | None = None  # epoch mode: passes over `batches(epoch)` (steps, eval_every, checkpoint_every unused)
    accumulate: int = 1  # batches per optimizer step (step mode)
    schedule: str = "linear"  # or "constant"
    weight_decay: float = 0.01  # AdamW's default; 0 gives Adam

    def check(self) -> None:
        check_at_least(self, ("steps", "eval_every", "patience", "checkpoint_every", "log_every", "accumulate"))
        if self.epochs is not None:
            check_at_least(self, ("epochs",))
            if self.accumulate != 1 or self.schedule != "constant":
                raise ConfigError("epoch mode trains with accumulate=1 and schedule='constant'")
        if not self.lr > 0:
            raise ConfigError(f"lr={self.lr}: must be > 0")
        if not 0 <= self.warmup < 1:
            raise ConfigError(f"warmup={self.warmup}: must be in [0, 1)")
        if self.clip is not None and not self.clip > 0:
            raise ConfigError(f"clip={self.clip}: must be > 0 (or None for no clipping)")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule={self.schedule!r}: allowed values are {', '.join(SCHEDULES)}")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay={self.weight_decay}: must be >= 0")


def lr_factor(step: int, total: int, warmup: float) -> float:
    """Linear warm-up over ``warmup * total`` steps, then linear decay to 0."""
    warm = max(1, int(warmup * total))
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (total - step) / max(1, total - warm))


def warmup_schedule(optimizer: torch.optim.Optimizer, steps: int, warmup: float) -> torch.optim.lr_scheduler.LambdaLR:
    """The :func:`lr_factor` schedule over ``steps`` optimizer steps."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, steps, warmup))


def check_resumable(saved: Mapping[str, Any], now: Mapping[str, Any], defaults: Mapping[str, Any],
                    may_change: tuple[str, ...] = BUDGET_SETTINGS, *,
                    start_over: str = "start over without --resume", what: str = "--resume: the checkpoint") -> None:
    """A checkpoint made with ``saved`` settings may continue under ``now`` if only ``may_change``
    differ (a setting added since the checkpoint counts as its default in ``defaults``)."""
    diff = [k for k in now if k not in may_change and saved.get(k, defaults.get(k)) != now[k]]
    if diff:
        raise ConfigError(f"{what} was made with other settings "
                          f"({', '.join(f'{k}={saved.get(k, defaults.get(k))!r}' for k in diff)}); "
                          f"use the same settings or {start_over}")


@dataclass
class TrainResult:
    steps_done: int
    stopped: str  # "steps", "epochs", "patience" or "max_minutes"
    best_metric: float | None
    best_step: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int | None = None  # epoch mode: the label of the best epoch
    steps_this_run: int = 0
    first_loss: float | None = None  # of this run's first and last optimizer steps
    last_loss: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _as_values(out: float | Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in out.items()} if isinstance(out, Mapping) else {"loss": float(out)}


MEAN_METRIC = "dev_mean"


def dev_metrics(evaluators: Sequence[tuple[str, Callable[[], float]]]) -> tuple[Callable[[], Any] | None, str | None]:
    """The trainer's ``evaluate`` and the name of the metric that decides, from one evaluator per
    dev set, each named ``metric:set`` (``dev_map:wikiqa``). One set decides by its own metric
    (the name before the colon); several are each reported and their mean, ``dev_mean``, decides:
    one set chose a checkpoint and flattered that set (docs/reranker.md), the mean weighs them
    alike. No evaluator: no evaluation (None, None). Two sets of one name are refused (their
    metrics would share a log key)."""
    names = [name for name, _ in evaluators]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"two dev sets would both be logged as {repeated[0]}: give each --dev once, from "
                          "directories of different names")
    if not evaluators:
        return None, None
    if len(evaluators) == 1:
        ((name, evaluate),) = evaluators
        return evaluate, name.partition(":")[0]

    def evaluate_all() -> dict[str, float]:
        metrics = {name: evaluate() for name, evaluate in evaluators}
        return {**metrics, MEAN_METRIC: sum(metrics.values()) / len(metrics)}

    return evaluate_all, MEAN_METRIC


class Trainer:
    """Trains ``model`` in ``out_dir`` (module docstring).

    ``defaults`` gives the value of a setting an older checkpoint lacks. Optional:
    ``batches`` (epoch mode: ``epoch -> batches``), ``also_train`` (named modules optimised with
    the model and checkpointed, not kept in ``best.pt``, e.g. a loss with parameters),
    ``evaluate_first`` (evaluate the untrained state), ``first_epoch`` (label of the first trained
    epoch; the untrained state is ``first_epoch - 1``), ``on_record`` (gets each evaluation or
    epoch record), ``progress_info`` (extra values for each logged step, e.g. a throughput),
    ``start_over`` (how to start over, named when a checkpoint is refused)."""

    def __init__(self, model: torch.nn.Module, settings: TrainerSettings, out_dir: str | Path | None, *,
                 step_loss: Callable[[Any], float | Mapping[str, float]],
                 evaluate: Callable[[], float | Mapping[str, float]] | None = None,
                 run_settings: Mapping[str, Any], defaults: Mapping[str, Any] | None = None,
                 description: str = "train", metric: str = "dev",
                 batches: Callable[[int], Sequence[Any]] | None = None,
                 also_train: Mapping[str, torch.nn.Module] | None = None, evaluate_first: bool = True,
                 first_epoch: int = 1, on_record: Callable[[dict[str, Any]], None] | None = None,
                 progress_info: Callable[[], Mapping[str, float]] | None = None,
                 start_over: str = DEFAULT_START_OVER):
        settings.check()
        if (settings.epochs is None) != (batches is None):
            raise ConfigError("epoch mode needs both settings.epochs and batches")
        self.model, self.settings = model, settings
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.step_loss, self.evaluate, self.batches = step_loss, evaluate, batches
        self.run_settings, self.defaults = dict(run_settings), dict(defaults or {})
        self.description, self.metric = description, metric
        self.also_train = dict(also_train or {})
        self.evaluate_first, self.first_epoch = evaluate_first, first_epoch
        self.on_record, self.progress_info, self.start_over = on_record, progress_info, start_over
        self.parameters = [p for m in (model, *self.also_train.values()) for p in m.parameters() if p.requires_grad]
        self.optimizer = adamw(self.parameters, settings.lr, settings.weight_decay)
        if settings.schedule == "linear":
            self.scheduler = warmup_schedule(self.optimizer, settings.steps, settings.warmup)
        else:
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _: 1.0)
        self.step = 0
        self.epoch = 0  # epochs done (epoch mode)
        self.best: float | None = None
        self.best_step = 0
        self.best_epoch: int | None = None
        self.best_state: dict[str, torch.Tensor] | None = None  # without out_dir
        self.waited = 0
        self.history: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ state on disk
    def _save(self) -> None:
        from hybrid_qpr.artifacts import save_checkpoint

        if self.out_dir is None:
            return
        save_checkpoint({"trainer": CHECKPOINT_FORMAT, "step": self.step, "epoch": self.epoch,
                         "model": self.model.state_dict(),
                         "also_train": {k: m.state_dict() for k, m in self.also_train.items()},
                         "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                         "best": self.best, "best_step": self.best_step, "best_epoch": self.best_epoch,
                         "waited": self.waited, "history": json.dumps(self.history),
                         "settings": self.run_settings}, self.out_dir / CHECKPOINT_FILE)

    def _restore(self) -> None:
        from hybrid_qpr.artifacts import load_checkpoint

        path = self.out_dir / CHECKPOINT_FILE if self.out_dir is not None else None
        if path is None or not path.is_file():
            logger.info("--resume: no checkpoint in %s, starting at step 0", self.out_dir)
            return
        state = load_checkpoint(path, self.start_over)
        # from before the one trainer, only step checkpoints (finetune's, the reranker's) can continue
        older = "trainer" not in state and ("epoch" in state or "scheduler" not in state or "settings" not in state)
        if older or ("trainer" not in state and self.batches is not None):
            raise ConfigError(f"{path}: a checkpoint of an older format than the one trainer's "
                              f"(docs/training.md#one-training-loop); {self.start_over}")
        implicit = self.start_over != DEFAULT_START_OVER  # a run that always resumes names the file, not --resume
        check_resumable(state["settings"], self.run_settings, self.defaults, start_over=self.start_over,
                        **({"what": str(path)} if implicit else {}))
        self.model.load_state_dict(state["model"])
        for name, module in self.also_train.items():
            module.load_state_dict(state["also_train"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch = int(state["step"]), int(state.get("epoch", 0))
        self.best, self.best_step, self.waited = state.get("best"), int(state.get("best_step", 0)), int(state.get("waited", 0))
        self.best_epoch = state.get("best_epoch")
        self.history = json.loads(state.get("history", "[]"))
        where = f"after epoch {self.epoch} of {self.settings.epochs}" if self.batches is not None \
            else f"at step {self.step} of {self.settings.steps}"
        print(f"{self.description}: resuming {path} {where}", file=sys.stderr, flush=True)

    def _log(self, record: dict[str, Any]) -> None:
        if self.out_dir is not None:
            with (self.out_dir / LOG_FILE).open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------------ evaluation and records
    def _record(self, record: dict[str, Any], started: float) -> bool:
        """Evaluate (when there is ``evaluate``) into ``record``, keep the best state, log and
        report the record; True when patience has run out."""
        from hybrid_qpr.artifacts import save_checkpoint

        improved = False
        if self.evaluate is not None:
            self.model.eval()
            out = self.evaluate()
            self.model.train()
            metrics = dict(out) if isinstance(out, Mapping) else {self.metric: float(out)}
            value = float(metrics[self.metric])
            record.update(metrics)
            improved = self.best is None or value > self.best
            if improved:
                self.best, self.best_step, self.best_epoch, self.waited = value, self.step, record.get("epoch"), 0
                state = {"step": self.step, "metric": value, "model": self.model.state_dict()}
                if self.batches is not None:
                    state.update(epoch=record["epoch"], metrics=metrics)
                if self.out_dir is not None:
                    save_checkpoint(state, self.out_dir / BEST_FILE)
                else:
                    self.best_state = copy.deepcopy(state["model"])
            else:
                self.waited += 1
        record["seconds"] = round(time.perf_counter() - started, 1)
        self.history.append(record)
        self._log({"event": "eval" if self.batches is None else "epoch", **record})
        if self.on_record is not None:
            self.on_record(record)
        else:
            print(self._line(record, improved), file=sys.stderr, flush=True)
        return self._patience_spent

    @property
    def _patience_spent(self) -> bool:
        """``patience`` evaluations in a row without a gain: training is over."""
        return self.evaluate is not None and self.waited >= self.settings.patience

    def _line(self, record: dict[str, Any], improved: bool) -> str:
        where = f"epoch {record['epoch']}" if "epoch" in record else f"step {record['step']}"
        values = ", ".join(f"{k} {v:.4f}" for k, v in record.items()
                           if isinstance(v, float) and k not in ("seconds", "epoch_seconds"))
        best = "" if self.best is None else \
            (f" (best {self.best:.4f} at {where.split()[0]} {self.best_epoch if self.batches is not None else self.best_step}"
             f"{', new best' if improved else f', {self.waited} without gain'})")
        return f"{self.description}: {where} {values}{best}"

    # ------------------------------------------------------------------ one optimizer step
    def _optimizer_step(self, items: Sequence[Any]) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        values: dict[str, float] = {}
        for item in items:
            for k, v in _as_values(self.step_loss(item)).items():
                values[k] = values.get(k, 0.0) + v
        if self.settings.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.settings.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return values

    # ------------------------------------------------------------------ loops
    def run(self, resume: bool = False, show_progress: bool = True) -> TrainResult:
        s = self.settings
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(s.seed)
        if resume:
            self._restore()
        started = time.perf_counter()
        first_step = self.step
        losses: list[float] = []
        stopped = "steps" if self.batches is None else "epochs"
        self.model.train()
        for module in self.also_train.values():
            module.train()
        if resume and self._patience_spent:
            stopped = "patience"  # it had stopped there: rerunning (to export, say) trains no further
        elif self.evaluate is not None and self.evaluate_first and self.step == 0 and self.best is None:
            untrained = {"step": 0} if self.batches is None else {"epoch": self.first_epoch - 1, "step": 0}
            if self._record({**untrained, "loss": None}, started):
                stopped = "patience"
        if stopped in ("steps", "epochs"):
            loop = self._run_steps if self.batches is None else self._run_epochs
            stopped = loop(started, losses, show_progress, stopped)
        if self.evaluate is not None:
            self._load_best()
        return TrainResult(self.step, stopped, self.best, self.best_step, round(time.perf_counter() - started, 1),
                           list(self.history), self.best_epoch, self.step - first_step,
                           losses[0] if losses else None, losses[-1] if losses else None)

    def _load_best(self) -> None:
        from hybrid_qpr.artifacts import load_checkpoint

        if self.out_dir is None:
            if self.best_state is not None:
                self.model.load_state_dict(self.best_state)
        elif (self.out_dir / BEST_FILE).is_file():
            self.model.load_state_dict(load_checkpoint(self.out_dir / BEST_FILE, "train again")["model"])

    def _out_of_time(self, started: float) -> bool:
        return self.settings.max_minutes is not None and time.perf_counter() - started > 60 * self.settings.max_minutes

    def _run_steps(self, started: float, losses: list[float], show_progress: bool, stopped: str) -> str:
        from hybrid_qpr.progress import track

        s = self.settings
        window: list[dict[str, float]] = []
        last = {"loss": math.nan}
        steps = range(self.step, s.steps)
        if show_progress:
            steps = track(steps, total=len(steps), description=self.description, status=lambda: " ".join(
                [f"step {self.step} loss {last['loss']:.4f} lr {self.scheduler.get_last_lr()[0]:.2e}",
                 *(f"{k} {v:,.1f}" for k, v in (self.progress_info() if self.progress_info else {}).items())]))
        for step in steps:
            values = self._optimizer_step(range(step * s.accumulate, (step + 1) * s.accumulate))
            losses.append(values["loss"])
            window = (window + [values])[-s.log_every:]
            last["loss"] = sum(v["loss"] for v in window) / len(window)
            out_of_time = self._out_of_time(started)
            if self.step % s.log_every == 0 or self.step == s.steps or out_of_time:
                means = {k: sum(v.get(k, 0.0) for v in window) / len(window) for k in window[-1]}
                self._log({"step": self.step, **means, "lr": self.scheduler.get_last_lr()[0],
                           **(self.progress_info() if self.progress_info else {}),
                           "seconds": round(time.perf_counter() - started, 1)})
            evaluated = self.evaluate is not None and (self.step % s.eval_every == 0 or self.step == s.steps
                                                       or out_of_time)
            if evaluated:
                recent = losses[-s.eval_every:]
                if self._record({"step": self.step, "loss": sum(recent) / len(recent)}, started):
                    stopped = "patience"
            if out_of_time and stopped == "steps":
                stopped = "max_minutes"
                logger.info("max_minutes %s reached after step %d of %d", s.max_minutes, self.step, s.steps)
            if evaluated or stopped != "steps" or self.step % s.checkpoint_every == 0 or self.step == s.steps:
                self._save()
            if stopped != "steps":
                break
        return stopped

    def _run_epochs(self, started: float, losses: list[float], show_progress: bool, stopped: str) -> str:
        from hybrid_qpr.progress import track

        assert self.batches is not None and self.settings.epochs is not None
        for epoch in range(self.epoch, self.settings.epochs):
            batches = self.batches(epoch)
            epoch_started = time.perf_counter()
            sums: dict[str, float] = {}
            done = [0]
            items: Any = batches
            if show_progress:
                items = track(batches, total=len(batches), description=f"{self.description} epoch {epoch + self.first_epoch}",
                              status=lambda: f"loss {sums.get('loss', 0.0) / max(1, done[0]):.4f}")
            for batch in items:
                values = self._optimizer_step([batch])
                losses.append(values["loss"])
                for k, v in values.items():
                    sums[k] = sums.get(k, 0.0) + v
                done[0] += 1
            self.epoch = epoch + 1
            record = {"epoch": epoch + self.first_epoch, "step": self.step,
                      **{"loss": 0.0, **{k: v / max(1, done[0]) for k, v in sums.items()}},
                      "epoch_seconds": time.perf_counter() - epoch_started}
            if self._record(record, started):
                stopped = "patience"
            elif self._out_of_time(started):
                stopped = "max_minutes"
            self._save()
            if stopped != "epochs":
                break
        return stopped
