"""The SDML CNN on onnxruntime: word ids from the shared vocabulary in, vectors out."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hybrid_qpr.encoders.base import MODEL_FILE, TOKENIZER_FILE, Encoder, onnx_session
from hybrid_qpr.text.tokenizer import Vocabulary


class CNNEncoder(Encoder):
    """ONNX graph contract: input ``input_ids`` int64 [batch, seq] (0 = padding),
    output ``embeddings`` float32 [batch, dim]."""

    kind = "cnn"

    def __init__(self, model_dir: Path, config: dict, threads: int | None = None):
        super().__init__(model_dir, config)
        self.vocabulary = Vocabulary.load(Path(model_dir) / TOKENIZER_FILE)
        self.session = onnx_session(Path(model_dir) / MODEL_FILE, threads)

    def _encode_batch(self, texts: list[str], one_thread: bool = False) -> np.ndarray:
        ids = self.vocabulary.encode_batch(texts)
        (vectors,) = self.session.run(["embeddings"], {"input_ids": ids}, one_thread=one_thread)
        return vectors.astype(np.float32, copy=False)
