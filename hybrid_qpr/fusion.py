"""Pure fusion of ranked lists: reciprocal rank fusion and normalised weighted sums
(min-max, optionally with bounds; z-score; L2; distribution-based), and autocut.

Every backend (embedded and OpenSearch) fuses through these functions, so a hybrid
result means the same thing everywhere. Three numbers are kept apart, as Pyserini does:

* ``depth`` - how many hits are taken from the top of each input list;
* ``rrf_k`` - the RRF smoothing constant (60, Cormack et al. 2009);
* ``top_k`` - how many fused results are returned.

Weights. ``alpha`` is always the weight of the *second* list (kNN in ``HybridSearcher``)
and ``1 - alpha`` the weight of the first (BM25), for every method: ``alpha = 0`` ranks
like BM25 alone, ``alpha = 1`` like kNN alone.

Documents missing from a list (not in its top ``depth``) are handled explicitly:

* RRF: the missing list contributes 0 (the document has no rank there).
* weighted sum: the missing list contributes its *floor*, the lowest value its retrieved
  documents can have after normalisation (0 for min-max and DBSF; the list's minimum for
  z-score and L2), because a document the retriever did not return is at best as good as the
  worst one it did return.

Ties in the fused score are broken by document id (ascending), so the output (and hence
every page of it) is deterministic. Inputs are never modified.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Literal, NamedTuple, get_args

from hybrid_qpr.types import Hit
from hybrid_qpr.errors import ConfigError

# The one list of fusion methods: every other surface (CLI choices, the workbench's page and
# OpenAPI, OpenSearch's search pipelines) reads FUSION_METHODS.
Normalisation = Literal["minmax", "zscore", "l2", "dbsf"]
FusionMethod = Literal["rrf", Normalisation]
NORMALISATIONS: tuple[str, ...] = get_args(Normalisation)
FUSION_METHODS: tuple[str, ...] = ("rrf", *NORMALISATIONS)
RRF_K = 60
# Hits each list hands to fusion when nothing else is asked: 30, MSEM's lexical recall depth.
# Measured on the validation queries of Quora (3,000) and WikiAnswers (2,000) with the embedded index's
# own lists (docs/search.md, fusion): equal RRF and tuned fusion at depth 30 are at
# least as good as at 100 (within 0.0006 MRR@20), and the hybrid query is 0.2-0.3 ms faster.
DEFAULT_DEPTH = 30
# What a hybrid search uses when neither the caller nor the index's tuned defaults say.
DEFAULT_FUSION, DEFAULT_ALPHA = "rrf", 0.5
# BM25 candidates the rescore mode re-orders by the encoder (MSEM's production flow).
RESCORE_DEPTH = 30
RERANK_DEPTH = RESCORE_DEPTH  # the name before the mode was called rescore
# The lists a hybrid search fuses, in order (bounds and explanations name them).
LIST_NAMES: tuple[str, ...] = ("bm25", "knn")
BoundMode = Literal["apply", "clip", "ignore"]
BOUND_MODES: tuple[str, ...] = get_args(BoundMode)


@dataclass(frozen=True)
class Bound:
    """A fixed end of one list's min-max range (OpenSearch 3.x's ``lower_bounds``/``upper_bounds``,
    a documented subset). ``value`` is on the list's own score scale.

    * ``apply`` - the bound replaces the list's own minimum (maximum) when it lies beyond it, so a
      list whose scores are all strong is not stretched down to 0 (weak ones up to 1);
    * ``clip`` - the bound always replaces it, and scores beyond the bound normalise to 0 (1);
    * ``ignore`` - plain min-max (written out so a tuned setting can say "no bound")."""

    mode: BoundMode
    value: float

    @classmethod
    def parse(cls, text: str, where: str = "bound") -> "Bound":
        """``MODE:VALUE``, e.g. ``clip:0.3``."""
        mode, _, value = str(text).partition(":")
        if mode not in BOUND_MODES:
            raise ConfigError(f"{where}={text!r}: the mode must be one of {', '.join(BOUND_MODES)} (e.g. clip:0.3)")
        try:
            number = float(value) if value else 0.0
        except ValueError:
            raise ConfigError(f"{where}={text!r}: {value!r} is not a number (e.g. clip:0.3)") from None
        if not math.isfinite(number):
            raise ConfigError(f"{where}={text!r}: the value must be finite")
        return cls(mode, number)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.mode}:{self.value:g}"


@dataclass(frozen=True)
class Bounds:
    """Min-max bounds of one list: ``lower`` and/or ``upper`` (``None``: the list's own)."""

    lower: Bound | None = None
    upper: Bound | None = None

    def range(self, lo: float, hi: float) -> tuple[float, float]:
        """The ``(min, max)`` a list with scores in ``[lo, hi]`` is normalised over."""
        low, up = self.lower, self.upper
        if low is not None and (low.mode == "clip" or (low.mode == "apply" and low.value < lo)):
            lo = low.value
        if up is not None and (up.mode == "clip" or (up.mode == "apply" and up.value > hi)):
            hi = up.value
        return lo, hi

    def as_dict(self) -> dict[str, str]:
        return {side: str(bound) for side, bound in (("lower", self.lower), ("upper", self.upper)) if bound is not None}


def check_bounds(bounds: object, where: str = "bounds") -> dict[str, Bounds]:
    """``{"bm25"|"knn": {"lower"?: "MODE:VALUE", "upper"?: ...}}`` (as stored with tuned defaults
    and given by ``query --lower-bound/--upper-bound``), checked, as ``Bounds`` per list name."""
    if bounds is None:
        return {}
    if not isinstance(bounds, dict):
        raise ConfigError(f"{where}: must be an object {{list: {{lower, upper}}}}, found {bounds!r}")
    out = {}
    for name, sides in bounds.items():
        if isinstance(sides, Bounds):
            out[name] = sides
            continue
        if name not in LIST_NAMES or not isinstance(sides, dict) or set(sides) - {"lower", "upper"}:
            raise ConfigError(f"{where}.{name}: expected one of {', '.join(LIST_NAMES)} with lower and/or upper "
                              f"as MODE:VALUE, found {sides!r}")
        parsed = {side: text if isinstance(text, Bound) else Bound.parse(text, f"{where}.{name}.{side}")
                  for side, text in sides.items()}
        out[name] = Bounds(parsed.get("lower"), parsed.get("upper"))
    return out


class Fused(NamedTuple):
    """One fused document: its fused score and, per input list, its score and 1-based rank
    there (``None`` where the document was missing from that list)."""

    id: str
    score: float
    scores: tuple[float | None, ...]
    ranks: tuple[int | None, ...]


def check_fusion(fusion: str) -> FusionMethod:
    if fusion not in FUSION_METHODS:
        raise ConfigError(f"fusion={fusion!r}: allowed values are {', '.join(FUSION_METHODS)}")
    return fusion  # type: ignore[return-value]


def check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and 0.0 <= float(alpha) <= 1.0):
        raise ConfigError(f"alpha={alpha!r}: must be a number in [0, 1] (0 = BM25 only, 1 = kNN only)")
    return float(alpha)


def normalize(scores: Sequence[float], normalisation: Normalisation, bounds: Bounds | None = None) -> list[float]:
    """Normalise one list of scores (higher is better stays higher is better).

    * ``minmax``: ``(s - min) / (max - min)``; when ``max == min`` every score becomes 1.0
      (all retrieved documents are equally good, and better than a missing one at 0).
      ``bounds`` (min-max only) fix ``min``/``max`` (``Bound``); results are clipped to [0, 1].
    * ``dbsf``: distribution-based score fusion (Qdrant): ``(s - (mean - 3 std)) / (6 std)``
      clipped to [0, 1] (population std); when ``std == 0`` every score is 0.5 (the mean's value).
    * ``zscore``: ``(s - mean) / std`` (population std); when ``std == 0`` every score is 0.
    * ``l2``: ``s / ||s||_2`` (OpenSearch's ``l2`` normalisation); an all-zero list stays 0.
    """
    values = [float(s) for s in scores]
    if not values:
        return []
    if normalisation == "minmax":
        lo, hi = min(values), max(values)
        if bounds is not None:
            lo, hi = bounds.range(lo, hi)
            if hi <= lo:  # bounds that leave no range: at or above the top is 1, below 0
                return [1.0 if v >= hi else 0.0 for v in values]
            return [min(1.0, max(0.0, (v - lo) / (hi - lo))) for v in values]
        if hi == lo:
            return [1.0] * len(values)
        return [(v - lo) / (hi - lo) for v in values]
    if normalisation == "dbsf":
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if std == 0.0:
            return [0.5] * len(values)
        lo = mean - 3.0 * std
        return [min(1.0, max(0.0, (v - lo) / (6.0 * std))) for v in values]
    if normalisation == "zscore":
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if std == 0.0:
            return [0.0] * len(values)
        return [(v - mean) / std for v in values]
    if normalisation == "l2":
        norm = math.sqrt(sum(v * v for v in values))
        if norm == 0.0:
            return [0.0] * len(values)
        return [v / norm for v in values]
    raise ConfigError(f"normalisation={normalisation!r}: allowed values are {', '.join(NORMALISATIONS)}")


def _floor(normalised: list[float], normalisation: Normalisation) -> float:
    """What a list contributes for a document it did not return (see the module docstring)."""
    if normalisation in ("minmax", "dbsf") or not normalised:
        return 0.0
    return min(normalised)


def _weights(n_lists: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n_lists
    if len(weights) != n_lists:
        raise ConfigError(f"weights={list(weights)}: need one weight per list ({n_lists})")
    if any(w < 0 for w in weights):
        raise ConfigError(f"weights={list(weights)}: weights must be >= 0")
    return [float(w) for w in weights]


def _ranked(lists: Sequence[Sequence[Hit]], depth: int | None) -> list[list[Hit]]:
    """Each list cut to ``depth``, duplicates of an id dropped (first occurrence wins)."""
    if depth is not None and depth < 1:
        raise ConfigError(f"depth={depth}: must be >= 1")
    out = []
    for hits in lists:
        head = list(hits[:depth] if depth is not None else hits)
        if len({hit.id for hit in head}) == len(head):  # the usual case: no repeated id, nothing to drop
            out.append(head)
            continue
        seen: set[str] = set()
        kept = []
        for hit in hits:
            if hit.id not in seen:
                seen.add(hit.id)
                kept.append(hit)
            if depth is not None and len(kept) >= depth:
                break
        out.append(kept)
    return out


# One ranked list as fusion reads it: its ids, best first, each once, and their scores.
RankedIds = tuple[Sequence[str], Sequence[float]]


def _as_ranked(lists: Sequence[Sequence[Hit]], depth: int | None) -> list[RankedIds]:
    return [([hit.id for hit in hits], [hit.score for hit in hits]) for hits in _ranked(lists, depth)]


def _rrf_totals(ranked: Sequence[RankedIds], weights: Sequence[float], rrf_k: int) -> dict[str, float]:
    if rrf_k < 0:
        raise ConfigError(f"rrf_k={rrf_k}: must be >= 0 (the usual value is 60)")
    totals: dict[str, float] = {}
    total_of = totals.get
    for weight, (ids, _) in zip(weights, ranked):
        for rank, doc_id in enumerate(ids, start=1):
            totals[doc_id] = total_of(doc_id, 0.0) + weight / (rrf_k + rank)
    return totals


def _weighted_totals(ranked: Sequence[RankedIds], normalisation: str, weights: Sequence[float],
                     bounds: Sequence[Bounds | None] | None = None) -> dict[str, float]:
    if normalisation not in NORMALISATIONS:
        raise ConfigError(f"normalisation={normalisation!r}: allowed values are {', '.join(NORMALISATIONS)}")
    if bounds and any(bounds) and normalisation != "minmax":
        raise ConfigError(f"bounds apply to minmax fusion only, not {normalisation}")
    tables, floors = [], []
    for i, (ids, scores) in enumerate(ranked):
        normed = normalize(scores, normalisation, bounds[i] if bounds else None)  # type: ignore[arg-type]
        tables.append(dict(zip(ids, normed)))
        floors.append(_floor(normed, normalisation))  # type: ignore[arg-type]
    every = {doc_id for ids, _ in ranked for doc_id in ids}  # _finish orders them (score, then id)
    return {doc_id: sum(weight * table.get(doc_id, floor) for weight, table, floor in zip(weights, tables, floors))
            for doc_id in every}


def _finish(totals: dict[str, float], ranked: Sequence[RankedIds], top_k: int | None) -> list[Fused]:
    if top_k is not None and top_k < 0:
        raise ConfigError(f"top_k={top_k}: must be >= 0")
    if top_k is not None and top_k < len(totals):  # a page of a long list: sort only what can be on it
        cut = sorted(totals.values(), reverse=True)[top_k - 1] if top_k else math.inf
        order = sorted([(-score, doc_id) for doc_id, score in totals.items() if score >= cut])[:top_k]
    else:  # (-score, id) pairs sort in C, score descending then id, with no key call per document
        order = sorted([(-score, doc_id) for doc_id, score in totals.items()])
    positions = [dict(zip(ids, zip(count(1), scores))) for ids, scores in ranked]
    missing = (None, None)
    fused = []
    for negated, doc_id in order:
        ranks, scores = zip(*[where.get(doc_id, missing) for where in positions])
        fused.append(Fused(doc_id, -negated, scores, ranks))
    return fused


def rrf(lists: Sequence[Sequence[Hit]], *, rrf_k: int = RRF_K, weights: Sequence[float] | None = None,
        depth: int | None = None, top_k: int | None = None) -> list[Fused]:
    """Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009):
    ``score(d) = sum_i w_i / (rrf_k + rank_i(d))`` over the lists that contain ``d``
    (rank 1-based, within the first ``depth`` hits of each list). Scores are ignored,
    only ranks count, so lists on different scales need no normalisation."""
    ranked = _as_ranked(lists, depth)
    return _finish(_rrf_totals(ranked, _weights(len(ranked), weights), rrf_k), ranked, top_k)


def weighted_sum(lists: Sequence[Sequence[Hit]], *, normalisation: Normalisation = "minmax",
                 weights: Sequence[float] | None = None, depth: int | None = None,
                 top_k: int | None = None, bounds: Sequence[Bounds | None] | None = None) -> list[Fused]:
    """Convex combination of normalised scores (Bruch, Gai & Ingber, ACM TOIS 2023, "An
    analysis of fusion functions for hybrid retrieval"):
    ``score(d) = sum_i w_i * norm_i(d)``, where ``norm_i(d)`` is ``d``'s score in list i
    normalised over that list's first ``depth`` hits, or the list's floor when ``d`` is
    missing from it (0 for min-max and DBSF, the list's minimum for z-score and L2);
    ``bounds``: min-max bounds per list (``Bounds``)."""
    ranked = _as_ranked(lists, depth)
    return _finish(_weighted_totals(ranked, normalisation, _weights(len(ranked), weights), bounds), ranked, top_k)


def fuse(first: Sequence[Hit], second: Sequence[Hit], *, fusion: FusionMethod = "rrf", alpha: float = 0.5,
         rrf_k: int = RRF_K, depth: int | None = None, top_k: int | None = None,
         bounds: Mapping[str, Bounds] | None = None) -> list[Fused]:
    """Fuse two ranked lists (BM25 first, kNN second) with weights ``(1 - alpha, alpha)``."""
    return fuse_ranked(*_as_ranked([first, second], depth), fusion=fusion, alpha=alpha, rrf_k=rrf_k, top_k=top_k,
                       bounds=bounds)


def fuse_ranked(first: RankedIds, second: RankedIds, *, fusion: FusionMethod = "rrf", alpha: float = 0.5,
                rrf_k: int = RRF_K, top_k: int | None = None, bounds: Mapping[str, Bounds] | None = None) -> list[Fused]:
    """``fuse`` of two lists given as ``(ids, scores)``, best first, each id once and each
    list already cut to its depth (``types.RankedList``): the searcher fuses every backend's
    lists this way, with no ``Hit`` per listed document. ``bounds``: min-max bounds by list
    name (``LIST_NAMES``; ``check_bounds``), for ``fusion="minmax"`` only."""
    check_fusion(fusion)
    alpha = check_alpha(alpha)
    weights, ranked = (1.0 - alpha, alpha), [first, second]
    if fusion == "rrf":
        if bounds:
            raise ConfigError("bounds apply to minmax fusion only, not rrf")
        totals = _rrf_totals(ranked, weights, rrf_k)
    else:
        per_list = [bounds.get(name) for name in LIST_NAMES] if bounds else None
        totals = _weighted_totals(ranked, fusion, weights, per_list)
    return _finish(totals, ranked, top_k)


def autocut(scores: Sequence[float], jumps: int) -> int:
    """How many of ``scores`` (best first) to keep when the tail after a score gap is dropped
    (Weaviate's autocut, this project's reading): the list is cut after the deepest of its
    ``jumps`` largest gaps between neighbouring scores (1: after the largest gap). Never fewer than one result; ``jumps`` 0, a list of
    at most two results, or one where every score is equal keeps everything."""
    if jumps < 0:
        raise ConfigError(f"autocut={jumps}: must be >= 0 (0 = off)")
    n = len(scores)
    if jumps == 0 or n <= 2 or scores[0] == scores[-1]:
        return n
    # the first and last scores differ, so the largest gap is positive: something is cut
    gaps = sorted(range(n - 1), key=lambda i: (-(scores[i] - scores[i + 1]), i))[:jumps]
    return max(i for i in gaps if scores[i] - scores[i + 1] > 0) + 1


def check_fusion_defaults(defaults: object, where: str) -> dict:
    """Tuned fusion defaults as ``tune`` stores them with an index and a model directory carries
    them in its config.json (``{"fusion", "alpha", "depth"?, "bounds"?, "signals"?, "tuned"?,
    "reranker"?: {"depth", "model"}}``),
    checked; ``where`` names their file in the one-line error."""
    if not isinstance(defaults, dict):
        raise ConfigError(f"{where}: fusion_defaults must be an object with fusion and alpha, found {defaults!r}")
    try:
        check_fusion(defaults.get("fusion"))  # type: ignore[arg-type]
        check_alpha(defaults.get("alpha"))  # type: ignore[arg-type]
        check_bounds(defaults.get("bounds"), "bounds")
        if defaults.get("signals") is not None:
            from hybrid_qpr.signals import Signals

            Signals.from_dict(defaults["signals"], "signals")
    except ConfigError as exc:
        raise ConfigError(f"{where}: fusion_defaults: {exc}") from None
    reranker = defaults.get("reranker", {})
    if not isinstance(reranker, dict):
        raise ConfigError(f"{where}: fusion_defaults.reranker must be an object with depth and model, found {reranker!r}")
    # reranker depth 0: tuning found the reranker no help on this index (a query says so)
    for name, value, least in (("depth", defaults.get("depth"), 1), ("reranker.depth", reranker.get("depth"), 0)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(f"{where}: fusion_defaults.{name}={value!r}: must be a whole number >= {least}")
    return dict(defaults)
