"""Weight-space interpolation of a fine-tuned transformer with its base model (WiSE-FT).

Fine-tuning on one domain's pairs can cost quality elsewhere: MiniLM fine-tuned on Quora gains
on Quora and loses on SQuAD answer retrieval. Wortsman et al. ("Robust fine-tuning of zero-shot
models", CVPR 2022) showed that the straight line between the base weights and the fine-tuned
weights keeps most of the in-domain gain while recovering the base model's robustness:

    theta(w) = (1 - w) * theta_base + w * theta_tuned,      w in [0, 1]

w = 1 is the fine-tuned model, w = 0 the base model. Both must share one architecture (same
parameter names and shapes); only floating-point tensors are mixed, integer buffers (position
ids) are the fine-tuned model's. The result is a model directory like a fine-tuning run's
``model/``: ``hybrid-qpr export`` takes it as it is.

The same line joins two cross-encoders that share an ancestor (a reranker and the run continued
from it with other negatives): averaging such fine-tuned weights ("model soups", Wortsman et al.,
ICML 2022) can keep what each run learned. For the bundled reranker the midpoint of its two runs
ranked above both ends on two of three dev sets (docs/reranker.md). The result is then a
reranker run's ``model/``, exported by ``hybrid-qpr reranker export``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from hybrid_qpr.errors import ConfigError

logger = logging.getLogger(__name__)


def interpolate_state(base: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor],
                      weight: float) -> dict[str, torch.Tensor]:
    """``(1 - weight) * base + weight * tuned`` for every floating tensor; names and shapes must match."""
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"interpolation weight must be in [0, 1], got {weight}")
    missing = sorted(set(tuned) ^ set(base))
    if missing:
        raise ConfigError(f"the base and fine-tuned models differ in parameters: {', '.join(missing[:5])}"
                          + (" ..." if len(missing) > 5 else "") + "; interpolate a model with the base it was tuned from")
    mixed: dict[str, torch.Tensor] = {}
    for name, value in tuned.items():
        start = base[name]
        if start.shape != value.shape:
            raise ConfigError(f"parameter {name}: shape {tuple(start.shape)} in the base model, "
                              f"{tuple(value.shape)} in the fine-tuned one")
        mixed[name] = torch.lerp(start.to(value.dtype), value, weight) if value.is_floating_point() else value.clone()
    return mixed


def interpolate_model(tuned_dir: str | Path, out_dir: str | Path, weight: float,
                      base_dir: str | Path | None = None, *, export_dir: str | Path | None = None,
                      quantize: bool = False, checkpoint: str | None = None) -> dict[str, Any]:
    """Write ``out_dir``: the model of ``tuned_dir`` moved back toward ``base_dir`` (see the module doc).

    ``tuned_dir`` is a fine-tuning or ``reranker train`` run directory (its ``model/`` is used)
    or such a model directory. ``base_dir`` defaults to the base model recorded in its training
    settings, else (an embedder) the bundled all-MiniLM-L6-v2. The tuned model's settings
    (max_length, pooling, ...) are kept. ``export_dir`` also exports the result to ONNX
    (``quantize``: int8). ``checkpoint`` (``best`` or ``last``) takes a ``reranker train`` run's
    ``best.pt`` or ``checkpoint.pt`` instead of its ``model/``. Returns the settings written with
    the model (and the export's config under ``"export"``).
    """
    from hybrid_qpr.model import cross_encoder
    from hybrid_qpr.training.transformer import run_model_dir

    tuned, training, tuned_dir = _tuned_model(tuned_dir, checkpoint)
    model_class = type(tuned)
    if base_dir is None:
        base_dir = training.get("base_model")  # None: the bundled model, as finetune used
        if model_class is cross_encoder.CrossEncoder and not (base_dir and Path(base_dir).is_dir()):
            raise ConfigError(f"{tuned_dir}: its recorded base model ({base_dir or 'none'}) is not a directory here; "
                              "give the cross-encoder to mix it with as --base-model")
    if base_dir is not None:
        base_dir = run_model_dir(base_dir)  # a run directory stands for its model/, recorded or given
    base = model_class.from_dir(base_dir)
    with torch.no_grad():
        tuned.load_state_dict(interpolate_state(base.state_dict(), tuned.state_dict(), weight))
    interpolation = {"weight": weight, "base_model": str(base_dir) if base_dir else None, "tuned_model": str(tuned_dir),
                     **({"tuned_checkpoint": checkpoint, "tuned_step": training["step"]} if checkpoint else {})}
    tuned.save(out_dir, extra={"training": training, "interpolation": interpolation})
    logger.info("wrote %s: %.2f x %s + %.2f x %s", out_dir, weight, tuned_dir, 1 - weight, base_dir or "base")
    report = {**tuned.settings(), "training": training, "interpolation": interpolation}
    if export_dir is not None:
        if model_class is cross_encoder.CrossEncoder:
            from hybrid_qpr.export.cross_encoder import export_cross_encoder as export
        else:
            from hybrid_qpr.export.transformer import export_transformer as export
        report["export"] = export(tuned, export_dir, quantize=quantize, training={**training, "interpolation": interpolation})
    return report


def _tuned_model(tuned_dir: str | Path, checkpoint: str | None):
    """(model, its training record, the directory it came from): a fine-tuned embedder or a
    cross-encoder from a model directory or a run's ``model/``, or a run's checkpoint."""
    from hybrid_qpr.model import cross_encoder, transformer
    from hybrid_qpr.training.transformer import run_model_dir

    if checkpoint is not None:
        from hybrid_qpr.training.reranker import load_run_checkpoint

        model, training = load_run_checkpoint(tuned_dir, checkpoint)
        return model, training, Path(tuned_dir)
    tuned_dir = run_model_dir(tuned_dir)
    for model_class, settings_file in ((cross_encoder.CrossEncoder, cross_encoder.SETTINGS_FILE),
                                       (transformer.TransformerEmbedder, transformer.SETTINGS_FILE)):
        if (tuned_dir / settings_file).is_file():
            training = transformer.read_settings(tuned_dir, settings_file).get("training") or {}
            return model_class.from_dir(tuned_dir), training, tuned_dir
    raise ConfigError(f"{tuned_dir}: no {transformer.SETTINGS_FILE} or {cross_encoder.SETTINGS_FILE}; give a "
                      "'hybrid-qpr finetune' or 'hybrid-qpr reranker train' run, or its model/ directory")
