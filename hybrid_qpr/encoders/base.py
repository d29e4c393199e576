"""Inference-time encoders: text in, float32 vectors out, on onnxruntime only.

This module never imports torch, so ingest and query run where torch is not installed.
A model directory holds ``model.onnx``, ``tokenizer.json`` and ``config.json``;
``config.json["kind"]`` says which encoder reads it (``artifacts.ENCODER_KINDS``: "transformer",
"cnn", "asymmetric"; the module ``hybrid_qpr.encoders.<kind>``).

An **asymmetric** model directory (``kind: "asymmetric"``, ``format_version`` 2) holds one
such directory per side instead: ``config.json["sides"]`` names the subdirectory that
encodes queries (questions) and the one that encodes documents (answers); both may name the
same subdirectory (shared weights). ``Encoder.encode(texts, side=...)`` picks the side;
``side`` is ignored by symmetric encoders, so every caller can pass it. Backends encode
documents with ``side="document"``, searches encode queries with the default ``"query"``.
Directories of format_version 1 (or none) load exactly as before.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr import resources
from hybrid_qpr.artifacts import (ENCODER_CONFIG_FILE, ENCODER_FORMAT, ENCODER_KINDS, ENCODER_MODEL_FILE, ENCODER_SIDES,
                                  ENCODER_TOKENIZER_FILE, EncoderSide, encoder_side_dirs, read_encoder_config)
from hybrid_qpr.distance import Distance
from hybrid_qpr.errors import ArtifactError, ConfigError, ModelMismatchError

logger = logging.getLogger(__name__)

# The encoder directory's layout and config.json are written and read by hybrid_qpr.artifacts.
CONFIG_FORMAT = ENCODER_FORMAT
MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE = ENCODER_MODEL_FILE, ENCODER_TOKENIZER_FILE, ENCODER_CONFIG_FILE
read_config = read_encoder_config
side_dirs = encoder_side_dirs
Side = EncoderSide
SIDES = ENCODER_SIDES

# The model shipped with the package (top-level onnx/); used when no --model is given.
DEFAULT_MODEL_DIR = resources.model_dir()


def fingerprint(model_dir: str | Path) -> str:
    """sha256 over the model and tokenizer bytes: an index records it and refuses other models.
    For an asymmetric model, over both sides' files in side order."""
    model_dir = Path(model_dir)
    digest = hashlib.sha256()
    if (model_dir / MODEL_FILE).is_file():
        for name in (MODEL_FILE, TOKENIZER_FILE):
            digest.update((model_dir / name).read_bytes())
        return digest.hexdigest()[:16]
    for side, directory in side_dirs(model_dir, read_config(model_dir)).items():
        digest.update(side.encode())
        for name in (MODEL_FILE, TOKENIZER_FILE):
            digest.update((directory / name).read_bytes())
    return digest.hexdigest()[:16]


def onnx_session(model_path: Path, threads: int | None = None, *, one_row_first: bool = True) -> "OnnxModel":
    """An onnxruntime CPU session (``OnnxModel``); a corrupt file becomes ``ArtifactError``.
    ``one_row_first``: the model runs mostly one text at a time (an encoder's queries); False
    for a model that runs batches (a reranker's pairs)."""
    return OnnxModel(model_path, threads, one_row_first=one_row_first)


def session_options(threads: int | None = None):
    """The onnxruntime ``SessionOptions`` every model of the library runs with (profilers reuse them)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle intra-op threads sleep instead of spinning: a spinning thread holds a core for
    # milliseconds after each call, which on two cores starves the BM25/kNN work (or the
    # search node) that follows a query's encoding. Measured: embedded hybrid p50 3.1 -> 2.2 ms
    # at 123,725 questions, and batch encoding no slower (docs/search.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Exact int8 products on x86 CPUs without VNNI (AVX2, AVX512 without VNNI): onnxruntime's
    # default u8 x s8 kernel there adds pairs of products in 16 bits, which saturate. Measured on
    # an AVX2 CPU, the bundled int8 reranker's WikiQA dev MAP was 0.697 without this and 0.804
    # with it, as on a VNNI CPU (docs/reranker.md); VNNI CPUs ignore the setting.
    options.add_session_config_entry("session.x64quantprecision", "1")
    return options


def _new_session(model_path: Path, threads: int | None):
    import onnxruntime as ort

    options = session_options(threads)
    try:
        return ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors on bad files
        raise ArtifactError(f"{model_path}: onnxruntime cannot load it ({exc})") from exc


class OnnxModel:
    """One model on onnxruntime: ``run`` and ``get_inputs`` as on an ``InferenceSession``.
    ``run(..., one_thread=True)`` (a search's one query) runs on a single-threaded session: for
    one short text, waking the intra-op threads costs more than they save (distilled CNN 0.139
    -> 0.115 ms, MiniLM int8 3.04 -> 2.84 ms per query; docs/search.md); batches run on a
    session with ``threads`` intra-op threads. The session ``one_row_first`` names is made at
    load (which checks the file), the other on first use: a one-off query never pays for the
    batch session (about 40 ms with the bundled model), a reranker never makes the one-row
    one. A process that runs both holds the weights twice (20-50 MB for the committed models)."""

    def __init__(self, model_path: Path, threads: int | None = None, *, one_row_first: bool = True):
        self.model_path = Path(model_path)
        self._threads = threads
        self._sessions: dict[bool, Any] = {}  # one_thread -> session
        self._lock = threading.Lock()
        self._session(one_row_first)

    def _session(self, one_thread: bool):
        one_thread = one_thread or self._threads == 1  # then one onnxruntime session serves both
        session = self._sessions.get(one_thread)
        if session is None:
            with self._lock:  # reader threads may ask at once: make it once
                if one_thread not in self._sessions:
                    self._sessions[one_thread] = _new_session(self.model_path, 1 if one_thread else self._threads)
                session = self._sessions[one_thread]
        return session

    def get_inputs(self):
        return next(iter(self._sessions.values())).get_inputs()

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], one_thread: bool = False):
        return self._session(one_thread).run(outputs, feeds)


class Encoder:
    """Base of the ONNX encoders. Use ``Encoder.load(dir)``; subclasses do ``_encode_batch``."""

    kind: str = ""
    _kinds: dict[str, Callable[[Path, dict], "Encoder"]] = {}

    def __init__(self, model_dir: Path, config: dict[str, Any]):
        self.model_dir = Path(model_dir)
        self.config = config
        self.dim: int = int(config["dim"])
        self.distance: Distance = config["distance"]
        self.fingerprint: str = fingerprint(model_dir)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.kind:
            Encoder._kinds[cls.kind] = cls

    @staticmethod
    def load(model_dir: str | Path | None = None, threads: int | None = None) -> "Encoder":
        """Load the encoder in ``model_dir``: a directory, or a model name (``fast``, ``quality``,
        a directory under ``onnx/``; ``hybrid_qpr.resources.resolve_model``). Default: ``fast``."""
        unknown = resources.unknown_model(model_dir)
        if unknown:
            raise ArtifactError(unknown)
        model_dir = resources.resolve_model(model_dir)
        config = read_config(model_dir)
        _import_encoder_kinds()
        kind = config["kind"]
        if kind not in Encoder._kinds:
            raise ArtifactError(f"{model_dir / CONFIG_FILE}: kind={kind!r}; allowed kinds are {sorted(Encoder._kinds)}")
        return Encoder._kinds[kind](model_dir, config, threads=threads)  # type: ignore[call-arg]

    def encode(self, texts: Sequence[str] | str, batch_size: int = 256, show_progress: bool = False,
               side: Side = "query") -> np.ndarray:
        """float32 [n, dim]; a single string gives [1, dim]. ``side`` ("query" or "document")
        matters only to asymmetric encoders; a symmetric one encodes both sides alike."""
        if side not in SIDES:
            raise ConfigError(f"side={side!r}: allowed values are {', '.join(SIDES)}")
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) == 1:  # a search's query: nothing to sort or scatter, and one thread is faster
            return self._checked(self._encode_batch(texts, one_thread=True))
        # Sorting by length keeps padding, and so wasted work, small inside each batch.
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        if show_progress:
            from hybrid_qpr.progress import track

            starts = track(starts, total=len(texts), description=f"encoding {side.replace('y', 'ie')}s",
                           weight=lambda start: min(batch_size, len(texts) - start))
        for start in starts:
            idx = order[start : start + batch_size]
            out[idx] = self._checked(self._encode_batch([texts[i] for i in idx]))
        return out

    def _checked(self, batch: np.ndarray) -> np.ndarray:
        if batch.ndim != 2 or batch.shape[1] != self.dim:  # a config.json that disagrees with its model
            raise ModelMismatchError(
                f"model {self.model_dir}: its config.json says dim {self.dim} but it outputs vectors of "
                f"{batch.shape[-1] if batch.ndim else 0} dims. Fix: correct \"dim\" in its config.json (or "
                "re-export the model)")
        return batch

    def _encode_batch(self, texts: list[str], one_thread: bool = False) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


def _import_encoder_kinds() -> None:
    """Register the encoder kinds (each module subclasses ``Encoder`` with its ``kind``)."""
    import importlib

    for kind in ENCODER_KINDS:  # a kind without its module fails here, never reads as unknown
        importlib.import_module(f"hybrid_qpr.encoders.{kind}")
