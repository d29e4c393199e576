"""A pretrained transformer (MiniLM) on onnxruntime, its WordPiece tokenizer run by ``tokenizers``.

Never imports torch or transformers: a fine-tuned or untouched MiniLM exported by
``hybrid_qpr.export.transformer`` is served with onnxruntime and the Rust ``tokenizers``
library only, like the CNN.

ONNX graph contract (kind "transformer"): inputs ``input_ids`` and ``attention_mask``,
int64 [batch, seq]; output ``embeddings`` float32 [batch, dim], already mean-pooled over
the non-padding tokens (and L2-normalised when ``config["normalize"]`` is true), so
this module only tokenizes and runs the graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hybrid_qpr.encoders.base import MODEL_FILE, TOKENIZER_FILE, Encoder, onnx_session
from hybrid_qpr.errors import ArtifactError, ConfigError

DEFAULT_MAX_LENGTH = 64


def wordpiece_tokenizer(path: str | Path, max_length: int = DEFAULT_MAX_LENGTH):
    """Load a Hugging Face ``tokenizer.json`` and set truncation to ``max_length`` tokens
    (``[CLS]`` and ``[SEP]`` included) and padding to the longest text of each batch.

    The one place that configures the transformer tokenizer: fine-tuning (torch) and
    inference (onnxruntime) both call it, so their token ids cannot drift apart.
    """
    from tokenizers import Tokenizer

    if max_length < 2:
        raise ConfigError(f"max_length={max_length}: must be >= 2 ([CLS] and [SEP] take two tokens)")
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: tokenizer file is missing")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise ArtifactError(f"{path}: not a valid tokenizers JSON file ({exc})") from exc
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tokenizer


def tokenize_batch(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, attention_mask)`` as int64 arrays [batch, longest text in the batch]."""
    encodings = tokenizer.encode_batch(texts)
    ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
    mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


class TransformerEncoder(Encoder):
    """MiniLM (or another BERT-like model) exported to ONNX with mean pooling in the graph."""

    kind = "transformer"

    def __init__(self, model_dir: Path, config: dict, threads: int | None = None):
        super().__init__(model_dir, config)
        self.max_length = int(config.get("max_length", DEFAULT_MAX_LENGTH))
        self.tokenizer = wordpiece_tokenizer(Path(model_dir) / TOKENIZER_FILE, self.max_length)
        self.session = onnx_session(Path(model_dir) / MODEL_FILE, threads)
        names = {i.name for i in self.session.get_inputs()}
        if names != {"input_ids", "attention_mask"}:
            raise ArtifactError(
                f"{Path(model_dir) / MODEL_FILE}: graph inputs are {sorted(names)}; a transformer encoder "
                "needs input_ids and attention_mask (export it with 'hybrid-qpr export --kind transformer')"
            )
        # Dynamic int8 quantization scales each MatMul input by the min/max of the whole batch,
        # so a text's vector would depend on the texts batched with it (up to 0.03 per component
        # for MiniLM; enough to move kNN MAP by 0.01 between two ingests of one corpus). Such a
        # model runs one text at a time: a text always gets the same vector, whoever encodes it
        # (ingest on any backend, tune, evaluate, a query). On CPU this cost no throughput here
        # (short texts need no padding then; measured under load: 14 texts/s either way).
        self.one_text_per_run = str(config.get("quantization", "")).startswith("int8-dynamic")

    def _encode_batch(self, texts: list[str], one_thread: bool = False) -> np.ndarray:
        if self.one_text_per_run and len(texts) > 1:
            return np.concatenate([self._run([text]) for text in texts])
        return self._run(texts, one_thread)

    def _run(self, texts: list[str], one_thread: bool = False) -> np.ndarray:
        ids, mask = tokenize_batch(self.tokenizer, texts)
        (vectors,) = self.session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask}, one_thread=one_thread)
        return vectors.astype(np.float32, copy=False)
