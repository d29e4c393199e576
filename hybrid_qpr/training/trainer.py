"""One training loop for step-based models: schedule, clipping, dev evaluation, patience, checkpoints.

A model plugs in two functions: ``step_loss(step) -> float``, which draws batch ``step`` (from
``(seed, step)`` alone, so a resumed run sees the batches an uninterrupted one would have seen),
runs forward and backward and returns the loss; and, optionally, ``evaluate() -> float``, a dev
metric where higher is better. The trainer owns everything around them:

* AdamW with linear warm-up over ``warmup * steps`` then linear decay to 0 (:func:`lr_factor`);
* the gradient norm clipped at ``clip`` before each optimizer step;
* ``evaluate`` at step 0 and every ``eval_every`` steps; the best state is written to
  ``best.pt`` (the untrained state is the one to beat, so a run that never improves keeps it),
  and training stops after ``patience`` evaluations without a gain;
* ``checkpoint.pt`` (model, optimizer, schedule, step, best so far, history) written atomically
  every ``checkpoint_every`` steps, after each evaluation and when stopping; ``resume=True``
  continues from it, refusing a checkpoint made with other settings except the budget ones
  (:data:`BUDGET_SETTINGS`);
* ``log.jsonl`` (one line per logged step and per evaluation) and progress: a bar on a terminal,
  a plain line every ``log_every`` steps off one (``hybrid_qpr.progress``);
* ``max_minutes``: stop after the step that crosses it, with the checkpoint written.

At the end the model holds the best evaluated state (the last state without ``evaluate``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hybrid_qpr.errors import ConfigError, check_at_least

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
BEST_FILE = "best.pt"
LOG_FILE = "log.jsonl"
# How long to train, not what: these may change when a run is resumed.
BUDGET_SETTINGS = ("steps", "patience", "max_minutes", "checkpoint_every", "log_every")


@dataclass(frozen=True)
class TrainerSettings:
    steps: int = 1000
    lr: float = 2e-5
    warmup: float = 0.1  # fraction of steps with a linearly rising learning rate
    clip: float = 1.0  # max gradient norm
    eval_every: int = 100
    patience: int = 5  # evaluations without a better dev metric before stopping
    checkpoint_every: int = 50
    log_every: int = 10
    max_minutes: float | None = None
    seed: int = 0

    def check(self) -> None:
        check_at_least(self, ("steps", "eval_every", "patience", "checkpoint_every", "log_every"))
        if not self.lr > 0:
            raise ConfigError(f"lr={self.lr}: must be > 0")
        if not 0 <= self.warmup < 1:
            raise ConfigError(f"warmup={self.warmup}: must be in [0, 1)")
        if not self.clip > 0:
            raise ConfigError(f"clip={self.clip}: must be > 0")


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
                    may_change: tuple[str, ...] = BUDGET_SETTINGS) -> None:
    """A checkpoint made with ``saved`` settings may continue under ``now`` if only ``may_change``
    differ (a setting added since the checkpoint counts as its default in ``defaults``)."""
    diff = [k for k in now if k not in may_change and saved.get(k, defaults.get(k)) != now[k]]
    if diff:
        raise ConfigError(f"--resume: the checkpoint was made with other settings "
                          f"({', '.join(f'{k}={saved.get(k, defaults.get(k))!r}' for k in diff)}); "
                          "use the same settings or start over without --resume")


def _say(line: str) -> None:
    """A progress line on stderr (stdout is left to the command's result)."""
    import sys

    print(line, file=sys.stderr, flush=True)


@dataclass
class TrainResult:
    steps_done: int
    stopped: str  # "steps", "patience" or "max_minutes"
    best_metric: float | None
    best_step: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Trainer:
    """Runs ``settings.steps`` optimizer steps of ``model`` in ``out_dir`` (module docstring).

    ``run_settings`` is every setting of the run (the model's and the trainer's, as plain
    values): it is stored in the checkpoint and compared on resume; ``defaults`` gives the value
    of a setting an older checkpoint lacks."""

    def __init__(self, model: torch.nn.Module, settings: TrainerSettings, out_dir: str | Path, *,
                 step_loss: Callable[[int], float], evaluate: Callable[[], float] | None = None,
                 run_settings: Mapping[str, Any], defaults: Mapping[str, Any] | None = None,
                 description: str = "train", metric: str = "dev"):
        settings.check()
        self.model, self.settings = model, settings
        self.out_dir = Path(out_dir)
        self.step_loss, self.evaluate = step_loss, evaluate
        self.run_settings, self.defaults = dict(run_settings), dict(defaults or {})
        self.description, self.metric = description, metric
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
        self.scheduler = warmup_schedule(self.optimizer, settings.steps, settings.warmup)
        self.step = 0
        self.best: float | None = None
        self.best_step = 0
        self.waited = 0
        self.history: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ state on disk
    def _save(self) -> None:
        from hybrid_qpr.artifacts import save_checkpoint

        save_checkpoint({"step": self.step, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                         "scheduler": self.scheduler.state_dict(), "best": self.best, "best_step": self.best_step,
                         "waited": self.waited, "history": json.dumps(self.history),
                         "settings": self.run_settings}, self.out_dir / CHECKPOINT_FILE)

    def _restore(self) -> None:
        from hybrid_qpr.artifacts import load_checkpoint

        path = self.out_dir / CHECKPOINT_FILE
        if not path.is_file():
            logger.info("--resume: no checkpoint in %s, starting at step 0", self.out_dir)
            return
        state = load_checkpoint(path, "remove it or run without --resume")
        check_resumable(state["settings"], self.run_settings, self.defaults)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.best, self.best_step, self.waited = state["best"], int(state["best_step"]), int(state["waited"])
        self.history = json.loads(state["history"])
        _say(f"{self.description}: resuming {path} at step {self.step} of {self.settings.steps}")

    def _log(self, record: dict[str, Any]) -> None:
        with (self.out_dir / LOG_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, started: float, losses: list[float]) -> bool:
        """Evaluate, keep the best state; True when patience has run out."""
        from hybrid_qpr.artifacts import save_checkpoint

        if self.evaluate is None:
            return False
        self.model.eval()
        value = float(self.evaluate())
        self.model.train()
        recent = losses[-self.settings.eval_every:]
        record = {"step": self.step, self.metric: value, "loss": sum(recent) / len(recent) if recent else None,
                  "seconds": round(time.perf_counter() - started, 1)}
        self.history.append(record)
        self._log({"event": "eval", **record})
        improved = self.best is None or value > self.best
        if improved:
            self.best, self.best_step, self.waited = value, self.step, 0
            save_checkpoint({"step": self.step, "metric": value, "model": self.model.state_dict()},
                            self.out_dir / BEST_FILE)
        else:
            self.waited += 1
        _say(f"{self.description}: step {self.step} {self.metric} {value:.4f} (best {self.best:.4f} at step "
             f"{self.best_step}{', new best' if improved else f', {self.waited} without gain'})")
        return self.waited >= self.settings.patience

    # ------------------------------------------------------------------ loop
    def run(self, resume: bool = False, show_progress: bool = True) -> TrainResult:
        from hybrid_qpr.progress import track

        s = self.settings
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(s.seed)
        if resume:
            self._restore()
        started = time.perf_counter()
        losses: list[float] = []
        stopped = "steps"
        self.model.train()
        if self.step == 0 and self.best is None and self._evaluate(started, losses):
            stopped = "patience"
        last = {"loss": math.nan}
        steps = range(self.step, s.steps) if stopped == "steps" else range(0)
        if show_progress:
            steps = track(steps, total=len(steps), description=self.description, plain_every=s.log_every,
                          status=lambda: f"step {self.step} loss {last['loss']:.4f} lr {self.scheduler.get_last_lr()[0]:.2e}")
        for step in steps:
            self.optimizer.zero_grad(set_to_none=True)
            loss = float(self.step_loss(step))
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.clip)
            self.optimizer.step()
            self.scheduler.step()
            self.step = step + 1
            losses.append(loss)
            last["loss"] = sum(losses[-s.log_every:]) / len(losses[-s.log_every:])
            if self.step % s.log_every == 0:
                self._log({"step": self.step, "loss": last["loss"], "lr": self.scheduler.get_last_lr()[0],
                           "seconds": round(time.perf_counter() - started, 1)})
            out_of_time = s.max_minutes is not None and time.perf_counter() - started > 60 * s.max_minutes
            evaluated = self.step % s.eval_every == 0 or self.step == s.steps
            if evaluated and self._evaluate(started, losses):
                stopped = "patience"
            if evaluated or out_of_time or stopped != "steps" or self.step % s.checkpoint_every == 0:
                self._save()
            if out_of_time:
                stopped = "max_minutes"
            if stopped != "steps":
                break
        if self.evaluate is not None and (self.out_dir / BEST_FILE).is_file():
            from hybrid_qpr.artifacts import load_checkpoint

            self.model.load_state_dict(load_checkpoint(self.out_dir / BEST_FILE, "train again")["model"])
        return TrainResult(self.step, stopped, self.best, self.best_step, round(time.perf_counter() - started, 1),
                           list(self.history))
