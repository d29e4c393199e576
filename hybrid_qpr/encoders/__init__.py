"""Inference-time encoders on onnxruntime (never torch): ``Encoder.load(model_dir)`` reads
``config.json`` and picks the kind (``cnn``, ``transformer``) from this package."""

from hybrid_qpr.encoders.base import (CONFIG_FILE, CONFIG_FORMAT, DEFAULT_MODEL_DIR, MODEL_FILE, TOKENIZER_FILE, Encoder,
                                      fingerprint, onnx_session, read_config)

__all__ = ["CONFIG_FILE", "CONFIG_FORMAT", "DEFAULT_MODEL_DIR", "MODEL_FILE", "TOKENIZER_FILE", "Encoder", "fingerprint",
           "onnx_session", "read_config"]
