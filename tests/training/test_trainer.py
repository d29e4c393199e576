"""The one training loop (hybrid_qpr.training.trainer) on a tiny linear model: accumulation,
epoch mode, the best state with and without a run directory, the time budget, resume and the
refusal of older checkpoints."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

torch = pytest.importorskip("torch")

from hybrid_qpr.errors import ConfigError  # noqa: E402
from hybrid_qpr.training.trainer import MEAN_METRIC, Trainer, TrainerSettings, dev_metrics  # noqa: E402

TARGET = torch.tensor([[2.0], [-1.0], [0.5]])


def _data(seed: int, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return x, x @ TARGET


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1, bias=False)


def _step_loss(model, scale: float = 1.0):
    def step_loss(batch: int) -> float:
        x, y = _data(batch)
        loss = torch.nn.functional.mse_loss(model(x), y) * scale
        loss.backward()
        return float(loss.detach())
    return step_loss


def test_accumulated_batches_step_like_their_mean():
    settings = TrainerSettings(steps=1, lr=0.1, warmup=0.0, clip=None, schedule="constant", weight_decay=0.0)
    accumulated = _model()
    Trainer(accumulated, dataclasses.replace(settings, accumulate=2), None, step_loss=_step_loss(accumulated, 0.5),
            run_settings={}).run(show_progress=False)
    merged = _model()

    def both(_: int) -> float:
        (xa, ya), (xb, yb) = _data(0), _data(1)
        loss = torch.nn.functional.mse_loss(merged(torch.cat([xa, xb])), torch.cat([ya, yb]))
        loss.backward()
        return float(loss.detach())

    Trainer(merged, settings, None, step_loss=both, run_settings={}).run(show_progress=False)
    assert torch.allclose(accumulated.weight, merged.weight, atol=1e-6)
    assert not torch.allclose(merged.weight, _model().weight)


def test_epoch_mode_keeps_the_best_epoch_in_memory_and_stops_on_patience():
    model = _model()
    scores = iter([0.1, 0.3, 0.2, 0.25, 0.9])  # untrained, then after epochs 1..4
    states = []

    def evaluate() -> dict[str, float]:
        states.append(model.weight.detach().clone())
        return {"val": next(scores), "other": 1.0}

    settings = TrainerSettings(epochs=6, lr=0.05, patience=2, schedule="constant", clip=None)
    result = Trainer(model, settings, None, step_loss=_step_loss(model), evaluate=evaluate, metric="val",
                     batches=lambda epoch: [epoch * 10 + i for i in range(3)], run_settings={}).run(show_progress=False)
    assert [r["epoch"] for r in result.history] == [0, 1, 2, 3] and result.stopped == "patience"
    assert result.best_epoch == 1 and result.best_metric == 0.3 and result.steps_done == 9
    assert torch.equal(model.weight, states[1])  # the best epoch's state is back in the model
    assert result.history[1]["other"] == 1.0 and result.history[1]["step"] == 3


def test_several_dev_sets_are_each_logged_and_their_mean_chooses_the_state():
    """Set a alone would keep epoch 1 (0.9); the mean of a and b is best at epoch 2."""
    model = _model()
    a, b = iter([0.1, 0.9, 0.6, 0.5, 0.5]), iter([0.1, 0.1, 0.8, 0.5, 0.5])
    evaluate, metric = dev_metrics([("dev_map:a", lambda: next(a)), ("dev_map:b", lambda: next(b))])
    assert metric == MEAN_METRIC
    settings = TrainerSettings(epochs=4, lr=0.05, patience=2, schedule="constant", clip=None)
    result = Trainer(model, settings, None, step_loss=_step_loss(model), evaluate=evaluate, metric=metric,
                     batches=lambda epoch: [epoch], run_settings={}).run(show_progress=False)
    assert result.best_epoch == 2 and result.best_metric == pytest.approx(0.7)
    assert result.history[1]["dev_map:a"] == 0.9 and result.history[1][MEAN_METRIC] == pytest.approx(0.5)


def test_one_dev_set_decides_by_its_own_metric_none_means_no_evaluation_and_a_repeat_is_refused():
    evaluate, metric = dev_metrics([("dev_mrr20:quora", lambda: 0.25)])
    assert metric == "dev_mrr20" and evaluate() == 0.25
    assert dev_metrics([]) == (None, None)
    with pytest.raises(ConfigError, match="both be logged as dev_map:wikiqa"):
        dev_metrics([("dev_map:wikiqa", lambda: 0.5), ("dev_map:wikiqa", lambda: 0.6)])


def test_time_budget_evaluates_then_stops_with_a_checkpoint(tmp_path):
    model = _model()
    settings = TrainerSettings(steps=50, lr=0.05, max_minutes=0.0, eval_every=20)
    result = Trainer(model, settings, tmp_path, step_loss=_step_loss(model), evaluate=lambda: 0.5,
                     run_settings={"lr": 0.05}).run(show_progress=False)
    assert result.stopped == "max_minutes" and result.steps_done == 1
    assert [r["step"] for r in result.history] == [0, 1]
    events = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [e.get("event") for e in events] == ["eval", None, "eval"]  # the untrained state, step 1 logged, evaluated
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "best.pt").is_file()


def test_resume_continues_refuses_other_settings_and_older_checkpoints(tmp_path):
    from hybrid_qpr.artifacts import save_checkpoint

    settings = TrainerSettings(steps=4, lr=0.05, warmup=0.0, checkpoint_every=2)
    uninterrupted = _model()
    Trainer(uninterrupted, settings, tmp_path / "a", step_loss=_step_loss(uninterrupted),
            run_settings={"lr": 0.05}).run(show_progress=False)
    first = _model()
    Trainer(first, dataclasses.replace(settings, max_minutes=0.0), tmp_path / "b", step_loss=_step_loss(first),
            run_settings={"lr": 0.05}).run(show_progress=False)  # stops after step 1
    resumed = _model()
    result = Trainer(resumed, settings, tmp_path / "b", step_loss=_step_loss(resumed),
                     run_settings={"lr": 0.05}).run(resume=True, show_progress=False)
    assert result.steps_this_run == 3 and torch.allclose(resumed.weight, uninterrupted.weight, atol=1e-6)
    with pytest.raises(ConfigError, match=r"other settings \(lr=0.05\)"):
        Trainer(_model(), settings, tmp_path / "b", step_loss=_step_loss(_model()),
                run_settings={"lr": 0.1}).run(resume=True, show_progress=False)
    model = _model()
    save_checkpoint({"model": model.state_dict(), "epoch": 3, "best_mrr": 0.5}, tmp_path / "old" / "checkpoint.pt")
    with pytest.raises(ConfigError, match="older format than the one trainer's.*start over without --resume"):
        Trainer(model, TrainerSettings(epochs=2, schedule="constant"), tmp_path / "old", step_loss=_step_loss(model),
                batches=lambda e: [e], run_settings={}).run(resume=True, show_progress=False)


def test_a_run_stopped_by_patience_resumes_without_training_unless_patience_grows(tmp_path):
    scores = iter([0.5, 0.4, 0.3, 0.9, 0.95, 0.9, 0.9])
    settings = TrainerSettings(epochs=6, lr=0.05, patience=2, schedule="constant", clip=None)

    def run(patience: int, resume: bool):
        model = _model()
        return Trainer(model, dataclasses.replace(settings, patience=patience), tmp_path, step_loss=_step_loss(model),
                       evaluate=lambda: next(scores), batches=lambda epoch: [epoch],
                       run_settings={}).run(resume=resume, show_progress=False)

    first = run(2, resume=False)
    assert first.stopped == "patience" and first.best_epoch == 0 and first.steps_done == 2
    again = run(2, resume=True)  # the same settings, rerun: nothing more to do
    assert again.steps_this_run == 0 and again.stopped == "patience" and again.best_metric == 0.5
    longer = run(4, resume=True)  # more patience: training goes on from epoch 3
    assert longer.steps_this_run > 0 and longer.best_metric == 0.95


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="schedule='cosine'"):
        TrainerSettings(schedule="cosine").check()
    with pytest.raises(ConfigError, match="epoch mode"):
        TrainerSettings(epochs=3).check()  # the linear schedule needs a known number of steps
    with pytest.raises(ConfigError, match="epoch mode needs both"):
        Trainer(_model(), TrainerSettings(epochs=3, schedule="constant"), None, step_loss=random.random, run_settings={})
