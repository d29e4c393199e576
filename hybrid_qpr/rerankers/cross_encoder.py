"""A cross-encoder reranker on onnxruntime: re-scores the top hits of a search, torch-free.

A reranker directory (written by ``hybrid_qpr.export.cross_encoder``) holds ``model.onnx``
(inputs ``input_ids``, ``attention_mask``, ``token_type_ids``; output ``scores``, one logit per
pair), ``tokenizer.json`` and ``config.json`` with ``kind: "cross-encoder"``, the truncation
settings and the sha256 of the tokenizer the model was trained with. Loading checks all of it:
a directory that is not a cross-encoder, or whose tokenizer is not the one recorded, is refused
with a one-line ``ArtifactError``.

A query's pairs are scored sorted by length, in a few onnxruntime runs of similar lengths
(:func:`length_runs`), so a short pair is not padded to the longest candidate of the query
(answer sentences vary from a few words to a paragraph's worth); padding is masked, so in fp32
the scores are those of one run. Dynamic int8 quantization scales activations per run, so an
int8 candidate's score depends slightly on the other pairs of its run; the same query over the
same hits always gets the same scores. One exception, by measurement: an int8 graph traced by
``torch.onnx`` (exports without ``"graph": "fused"`` in config.json) scores all pairs of a query
in **one** run, where length-sorted runs ranked worse (TrecQA dev MAP after BM25 / kNN: one run
0.803 / 0.822, length-sorted 0.790 / 0.810); the fused int8 graph ranks alike both ways and
length-sorted runs are a fifth faster (docs/reranker.md, "Latency").

**Interpolation with the first stage.** A reranked hit is ordered by the cross-encoder's logit
plus ``weight`` times its first-stage score normalised over the reranked head (:data:`NORMS`:
``minmax``, the first-stage score scaled to [0, 1]; ``rank``, ``(k + 1) / (k + rank)`` with the
RRF constant, 1 at rank 1). ``weight`` 0 is the cross-encoder alone; a large weight keeps the
first-stage order. ``tune --reranker`` chooses depth, norm and weight on validation queries
(:class:`Interpolation`), so that a second stage which does not help is switched off (depth 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from hybrid_qpr.artifacts import (CROSS_ENCODER_KIND, ENCODER_CONFIG_FILE, ENCODER_FORMAT, ENCODER_MODEL_FILE,
                                  ENCODER_TOKENIZER_FILE, read_manifest)
from hybrid_qpr.errors import ArtifactError, ConfigError, RerankerError
from hybrid_qpr.rerankers.pairs import PairTokenizer, tokenizer_sha256

KIND = CROSS_ENCODER_KIND
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "scores"
DEFAULT_RERANK_DEPTH = 20
# What one more onnxruntime run is taken to cost, in padded tokens (see length_runs). 4, 16 and 64
# timed alike on the 6-layer model (docs/reranker.md); 16 keeps the runs per query few.
RUN_COST_TOKENS = 16
ONE_RUN = 10**9  # a run cost no cut can beat: every pair of a query in one run (int8 models)
NORMS = ("minmax", "rank")
RANK_K = 60  # the RRF constant (hybrid_qpr.fusion.RRF_K): the rank norm is RRF's 1/(k + rank), scaled
TUNED_KEY = "second_stage"  # config.json: the depth, norm and weight 'tune --reranker --save-to-model' chose


class Interpolation(NamedTuple):
    """How a reranked hit's final score mixes in its first-stage score (module docstring)."""

    weight: float = 0.0
    norm: str = "minmax"

    @classmethod
    def of(cls, tuned: dict[str, Any] | None, where: str) -> "Interpolation":
        """The interpolation stored as ``{"weight", "norm"}`` (absent: the cross-encoder alone)."""
        tuned = tuned or {}
        weight, norm = tuned.get("weight", 0.0), tuned.get("norm", "minmax")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < float("inf"):
            raise ConfigError(f"{where}: reranker weight={weight!r}: must be a number >= 0")
        if norm not in NORMS:
            raise ConfigError(f"{where}: reranker norm={norm!r}: must be one of {', '.join(NORMS)}")
        return cls(float(weight), norm)

    def first_stage(self, scores: Sequence[float]) -> np.ndarray:
        """The normalised first-stage part of each reranked hit (best first-stage hit first)."""
        if self.norm == "rank":
            return (RANK_K + 1) / (RANK_K + np.arange(1, len(scores) + 1, dtype=np.float64))
        values = np.asarray(scores, dtype=np.float64)
        spread = float(values.max() - values.min()) if len(values) else 0.0
        return (values - values.min()) / spread if spread > 0 else np.ones(len(values))


class Reranked(NamedTuple):
    """A reranked hit's final score and its two parts (``score = logit + weight * first_stage``)."""

    logit: float
    first_stage: float
    weight: float
    score: float


def length_runs(lengths: Sequence[int], run_cost: int = RUN_COST_TOKENS) -> list[list[int]]:
    """The pairs' indices grouped into runs: sorted by length and cut so that the tokens computed
    (each run pads to its longest pair) plus ``run_cost`` per run are the fewest; dynamic
    programming over the sorted lengths (a query has tens of pairs, so O(n^2) is nothing)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = [0.0] + [float("inf")] * len(order)  # best[k]: cost of the k shortest pairs
    start_of = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        longest = lengths[order[end - 1]]
        for start in range(end):
            cost = best[start] + (end - start) * longest + run_cost
            if cost < best[end]:
                best[end], start_of[end] = cost, start
    runs, end = [], len(order)
    while end:
        runs.append(order[start_of[end] : end])
        end = start_of[end]
    return runs[::-1]


class Rerankable(Protocol):
    """What :meth:`Reranker.rerank` needs of a hit (``hybrid_qpr.search.SearchResult`` is one)."""

    text: str
    score: float  # the first stage's

    def with_cross_encoder(self, score: float | None, rank: int | None, first_stage_rank: int,
                           parts: Reranked | None = None) -> Any: ...


HitT = TypeVar("HitT", bound=Rerankable)


def bundled_rerankers() -> list[Path]:
    """The cross-encoders shipped with the package, by name: the directories under ``onnx/``
    (``hybrid_qpr.resources``) whose config.json has ``kind: "cross-encoder"``."""
    import json

    from hybrid_qpr import resources

    found = []
    for directory in sorted(resources.bundled("onnx").iterdir()):
        try:
            config = json.loads((directory / ENCODER_CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a model directory
        if isinstance(config, dict) and config.get("kind") == KIND:
            found.append(directory)
    return found


def bundled_reranker(fingerprint: str) -> Path | None:
    """The bundled cross-encoder whose model fingerprint is ``fingerprint`` (what an index's tuned
    reranker records), else ``None``."""
    from hybrid_qpr.encoders.base import fingerprint as fingerprint_of

    return next((directory for directory in bundled_rerankers() if fingerprint_of(directory) == fingerprint), None)


def read_reranker_config(model_dir: str | Path) -> dict[str, Any]:
    """The checked ``config.json`` of a reranker directory (``ArtifactError`` naming the problem)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ArtifactError(f"{model_dir}: reranker directory does not exist (expected model.onnx, tokenizer.json, "
                            "config.json from 'hybrid-qpr reranker export' or 'reranker train --export')")
    config_path = model_dir / ENCODER_CONFIG_FILE
    config = read_manifest(config_path, ENCODER_FORMAT, None, what="hybrid-qpr model config",
                           missing=f"{config_path}: missing; a reranker directory is written by 'hybrid-qpr reranker export'",
                           fix="export the reranker again with 'hybrid-qpr reranker export'")
    if config.get("kind") != KIND:
        raise ArtifactError(f"{model_dir}: kind={config.get('kind')!r} is not a cross-encoder; --reranker needs a "
                            "directory written by 'hybrid-qpr reranker export' (an encoder goes to --model)")
    for name in (ENCODER_MODEL_FILE, ENCODER_TOKENIZER_FILE):
        if not (model_dir / name).is_file():
            raise ArtifactError(f"{model_dir}: {name} is missing; export the reranker again with 'hybrid-qpr reranker export'")
    for key in ("max_length", "query_tokens", "tokenizer_sha256"):
        if key not in config:
            raise ArtifactError(f"{config_path}: the field {key!r} is missing")
    return config


class Reranker:
    """Scores (query, text) pairs with an exported cross-encoder; see the module docstring."""

    def __init__(self, model_dir: str | Path, threads: int | None = None, run_cost: int | None = None,
                 max_length: int | None = None, query_tokens: int | None = None):
        """``max_length`` / ``query_tokens``: cut pairs other than as trained (config.json's
        values; ``hybrid_qpr.rerankers.pairs``), e.g. to measure which cut ranks long forum posts
        best (``benchmarks/bench_reranker_cut.py``); the graph takes any length up to its
        position table (512 for MiniLM)."""
        from hybrid_qpr.encoders.base import fingerprint, onnx_session

        self.model_dir = Path(model_dir)
        self.config = read_reranker_config(self.model_dir)
        # what 'tune --reranker --save-to-model' stored; an index's own tuned values replace it
        self.interpolation = Interpolation.of(self.tuned, str(self.model_dir / ENCODER_CONFIG_FILE))
        # None: length-sorted runs, except one run for a traced int8 graph (module docstring)
        self.run_cost = run_cost if run_cost is not None else (
            ONE_RUN if self.config.get("quantization") and self.config.get("graph") != "fused" else RUN_COST_TOKENS)
        tokenizer_path = self.model_dir / ENCODER_TOKENIZER_FILE
        if tokenizer_sha256(tokenizer_path) != self.config["tokenizer_sha256"]:
            raise ArtifactError(f"{tokenizer_path}: not the tokenizer this cross-encoder was trained with (its sha256 "
                                "differs from config.json's tokenizer_sha256); export the reranker again")
        self.pairs = PairTokenizer(tokenizer_path, int(max_length or self.config["max_length"]),
                                   int(query_tokens or self.config["query_tokens"]))
        if "vocab_size" in self.config and self.pairs.vocab_size != int(self.config["vocab_size"]):
            raise ArtifactError(f"{tokenizer_path}: {self.pairs.vocab_size} tokens, the model expects "
                                f"{self.config['vocab_size']}; export the reranker again")
        self.session = onnx_session(self.model_dir / ENCODER_MODEL_FILE, threads, one_row_first=False)
        self.fingerprint = fingerprint(self.model_dir)
        names = {i.name for i in self.session.get_inputs()}
        if names != set(INPUTS):
            raise ArtifactError(f"{self.model_dir / ENCODER_MODEL_FILE}: graph inputs are {sorted(names)}; a "
                                f"cross-encoder needs {', '.join(INPUTS)}")

    @property
    def name(self) -> str:
        return str(self.model_dir)

    @property
    def tuned(self) -> dict[str, Any] | None:
        """The depth, norm and weight this directory's config.json carries (None: never tuned)."""
        tuned = self.config.get(TUNED_KEY)
        if tuned is not None and not isinstance(tuned, dict):
            raise ArtifactError(f"{self.model_dir / ENCODER_CONFIG_FILE}: {TUNED_KEY} must be an object with depth, "
                                f"norm and weight, found {tuned!r}")
        return tuned

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """float32 [len(texts)]: the relevance logit of each text for ``query`` (higher is better).
        Any failure of the model is raised as ``RerankerError`` naming this reranker."""
        texts = list(texts)
        if not texts:
            return np.zeros(0, dtype=np.float32)
        try:
            arrays = self.pairs.encode(query, texts)
            lengths = arrays[1].sum(axis=1)
            scores = np.full(len(texts), np.nan, dtype=np.float32)  # a row no run fills stays non-finite
            for run in length_runs(lengths.tolist(), self.run_cost):
                width = int(lengths[run].max())
                feeds = {name: array[run, :width] for name, array in zip(INPUTS, arrays)}
                (part,) = self.session.run([OUTPUT], feeds)
                part = np.asarray(part, dtype=np.float32).reshape(-1)
                if part.shape != (len(run),):
                    raise RerankerError(f"reranker {self.model_dir} returned {part.shape[0]} scores for {len(run)} "
                                        "texts; no results are shown re-ranked: run without --reranker for the "
                                        "first-stage results")
                scores[run] = part
        except RerankerError:
            raise
        except Exception as exc:  # onnxruntime and tokenizers raise their own untyped errors
            raise RerankerError(f"reranker {self.model_dir} failed on query {query[:60]!r} "
                                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); "
                                "no results are shown re-ranked: run without --reranker for the first-stage results") from exc
        if not np.isfinite(scores).all():
            raise RerankerError(f"reranker {self.model_dir} returned a non-finite score for {len(texts)} texts; "
                                "no results are shown re-ranked: run without --reranker "
                                "for the first-stage results")
        return scores

    def rerank(self, query: str, hits: Sequence[HitT], depth: int = DEFAULT_RERANK_DEPTH,
               interpolation: Interpolation | None = None) -> list:
        """The top ``depth`` of ``hits`` re-ordered by final score (the cross-encoder's logit plus
        the interpolated first-stage part; default: this reranker's ``interpolation``), ties in
        first-stage order, followed by the rest in their first-stage order. Each hit keeps its
        first-stage score and gains its first-stage rank, its cross-encoder score and rank and
        the parts of its final score (``None`` beyond ``depth``)."""
        if depth < 1:
            raise ConfigError(f"reranker depth={depth}: must be >= 1")
        head = list(hits[:depth])
        return self.reorder(hits, depth, self.score(query, [h.text for h in head]), interpolation)

    def reorder(self, hits: Sequence[HitT], depth: int, logits: Sequence[float],
                interpolation: Interpolation | None = None) -> list:
        """``rerank`` with the head's logits given (tuning scores a head once, tries many weights)."""
        interpolation = self.interpolation if interpolation is None else interpolation
        head, tail = list(hits[:depth]), list(hits[depth:])
        first = interpolation.first_stage([h.score for h in head])
        parts = [Reranked(float(logit), float(part), interpolation.weight, float(logit) + interpolation.weight * float(part))
                 for logit, part in zip(logits, first)]
        order = sorted(range(len(head)), key=lambda i: (-parts[i].score, i))
        out = [head[i].with_cross_encoder(parts[i].logit, rank, i + 1, parts[i]) for rank, i in enumerate(order, start=1)]
        out.extend(h.with_cross_encoder(None, None, len(head) + j + 1) for j, h in enumerate(tail))
        return out
