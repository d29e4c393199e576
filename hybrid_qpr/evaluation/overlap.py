"""Compare two search configurations without judgments: how much do their top hits overlap?

Given only queries (a query log), each configuration ranks each query; per query we report

* ``jaccard``: ``|A ∩ B| / |A ∪ B|`` of the two top-``k`` sets (order ignored);
* ``rbo``: rank-biased overlap (Webber, Moffat & Zobel, "A similarity measure for indefinite
  rankings", ACM TOIS 2010), the extrapolated form ``RBO_ext`` of their equation 32 (equal
  lengths) and 30 (different lengths) on the top ``k``. ``p`` (default 0.9) is the persistence:
  the weight of the first ``d`` ranks is ``1 - p**d``, so with 0.9 the top 10 carry about 86 %.
  1 means the same ranking, 0 no document in common.

and lists the queries whose top hits changed most (lowest RBO first). Nothing is judged: a
change is not a loss; it tells where to look (or what to judge next).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_qpr.errors import ConfigError

PERSISTENCE = 0.9
DEPTH = 10
CHANGED_SHOWN = 20


def _top(ranking: Sequence[str], k: int | None) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for doc in ranking:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
            if k is not None and len(out) == k:
                break
    return out


def jaccard(a: Sequence[str], b: Sequence[str], k: int | None = DEPTH) -> float:
    """Jaccard index of the first ``k`` distinct ids of each list (1.0 when both are empty)."""
    sa, sb = set(_top(a, k)), set(_top(b, k))
    return 1.0 if not sa and not sb else len(sa & sb) / len(sa | sb)


def rbo(a: Sequence[str], b: Sequence[str], p: float = PERSISTENCE, k: int | None = DEPTH) -> float:
    """Extrapolated rank-biased overlap of the first ``k`` distinct ids of ``a`` and ``b``.

    With ``X_d`` the overlap of the two prefixes of depth ``d``, ``s`` and ``l`` the lengths of
    the shorter list S and the longer list L (the paper's equation 30; 32 when ``s == l``)::

        RBO_ext = (1-p)/p * (sum_{d=1..l} X_d/d p^d + sum_{d=s+1..l} X_s (d-s)/(s d) p^d)
                  + ((X_l - X_s)/l + X_s/s) p^l

    where, past depth ``s``, ``X_d`` counts only L's first ``d`` against all of S."""
    if not 0 < p < 1:
        raise ConfigError(f"p={p}: the RBO persistence must be between 0 and 1 (exclusive)")
    short, long = _top(a, k), _top(b, k)
    if len(short) > len(long):
        short, long = long, short
    s, l = len(short), len(long)
    if l == 0:
        return 1.0
    if s == 0:
        return 0.0
    seen_short: set[str] = set()
    seen_long: set[str] = set()
    overlap = 0
    total = 0.0
    x_s = 0
    for d in range(1, l + 1):
        x = long[d - 1]
        if d <= s:
            y = short[d - 1]
            if x == y:
                overlap += 1
            else:
                overlap += (x in seen_short) + (y in seen_long)
            seen_short.add(y)
            seen_long.add(x)
            if d == s:
                x_s = overlap
        else:
            overlap += x in seen_short
            total += x_s * (d - s) / (s * d) * p ** d
        total += overlap / d * p ** d
    return (1 - p) / p * total + ((overlap - x_s) / l + x_s / s) * p ** l


@dataclass(frozen=True)
class Configuration:
    """One way to search: a mode and, for hybrid, a fusion and weight (``None``: the index's
    default); ``index`` names which index it searches when two are compared."""

    mode: str = "hybrid"
    fusion: str | None = None
    alpha: float | None = None
    index: str | None = None

    @classmethod
    def parse(cls, spec: str) -> "Configuration":
        """``MODE[,fusion=F][,alpha=A][,index=DIR]``, e.g. ``hybrid,fusion=rrf,alpha=0.3`` or ``knn``."""
        from hybrid_qpr.fusion import FUSION_METHODS
        from hybrid_qpr.search import ACCEPTED_MODES, MODE_ALIASES, MODES

        parts = [part.strip() for part in spec.split(",") if part.strip()]
        if not parts or parts[0] not in ACCEPTED_MODES:
            raise ConfigError(f"{spec!r}: a configuration starts with a mode ({', '.join(MODES)}), "
                              "e.g. 'hybrid,fusion=rrf,alpha=0.3'")
        values: dict[str, Any] = {"mode": MODE_ALIASES.get(parts[0], parts[0])}
        for part in parts[1:]:
            key, sep, value = part.partition("=")
            if not sep or key not in ("fusion", "alpha", "index") or key in values:
                raise ConfigError(f"{spec!r}: {part!r} is not fusion=..., alpha=... or index=... (each at most once)")
            if key == "fusion" and value not in FUSION_METHODS:
                raise ConfigError(f"{spec!r}: fusion {value!r} is not one of {', '.join(FUSION_METHODS)}")
            if key == "alpha":
                try:
                    value = float(value)
                except ValueError:
                    raise ConfigError(f"{spec!r}: alpha must be a number between 0 and 1") from None
                if not 0 <= value <= 1:
                    raise ConfigError(f"{spec!r}: alpha must be between 0 and 1")
            values[key] = value
        return cls(**values)

    def label(self) -> str:
        extra = [f"{k}={v}" for k, v in (("fusion", self.fusion), ("alpha", self.alpha), ("index", self.index)) if v is not None]
        return ",".join([self.mode, *extra])

    def search_kwargs(self) -> dict[str, Any]:
        return {"mode": self.mode, **({"fusion": self.fusion} if self.fusion else {}),
                **({"alpha": self.alpha} if self.alpha is not None else {})}


def run_queries(searchers: Sequence[Any], configurations: Sequence[Configuration], queries: Mapping[str, str],
                k: int) -> tuple[list[dict[str, list[str]]], float]:
    """The top-``k`` ids of every query under each configuration (``searchers[i]`` runs
    ``configurations[i]``) and the seconds it took. A query is encoded once per searcher, one
    query at a time as a user's search is (an int8 model's vector depends on its batch), and
    that vector serves every configuration on the same searcher. The first query is searched
    once per configuration before the clock starts, so one-off costs (compiling the BM25
    scorer, opening files) are not counted."""
    runs: list[dict[str, list[str]]] = [{} for _ in configurations]
    for searcher, config in zip(searchers, configurations):
        for text in list(queries.values())[:1]:
            searcher.search(text, top_k=k, **config.search_kwargs())
    start = time.perf_counter()
    for qid, text in queries.items():
        vectors: dict[int, Any] = {}
        for i, (searcher, config) in enumerate(zip(searchers, configurations)):
            vector = None
            if config.mode != "bm25" and searcher.encoder is not None:
                if id(searcher) not in vectors:
                    vectors[id(searcher)] = searcher.encoder.encode([text])[0]
                vector = vectors[id(searcher)]
            runs[i][qid] = [r.id for r in searcher.search(text, top_k=k, vector=vector, **config.search_kwargs())]
    return runs, time.perf_counter() - start


def overlap_report(run_a: Mapping[str, Sequence[str]], run_b: Mapping[str, Sequence[str]],
                   queries: Mapping[str, str], *, k: int = DEPTH, p: float = PERSISTENCE,
                   shown: int = CHANGED_SHOWN) -> dict[str, Any]:
    """Mean Jaccard@k and RBO, the share of queries with the same first hit and the same top
    ``k``, and the ``shown`` queries that changed most (lowest RBO, then lowest Jaccard)."""
    rows = []
    for qid, text in queries.items():
        a, b = _top(run_a.get(qid, ()), k), _top(run_b.get(qid, ()), k)
        rows.append({"id": qid, "query": text, "rbo": rbo(a, b, p, k), "jaccard": jaccard(a, b, k),
                     "a": a, "b": b, "only_a": [d for d in a if d not in b], "only_b": [d for d in b if d not in a]})
    if not rows:
        raise ConfigError("no queries to compare")
    n = len(rows)
    changed = sorted(rows, key=lambda r: (r["rbo"], r["jaccard"], r["id"]))
    return {"queries": n, "k": k, "p": p,
            "rbo": sum(r["rbo"] for r in rows) / n, "jaccard": sum(r["jaccard"] for r in rows) / n,
            "same_first": sum(bool(r["a"]) and r["a"][:1] == r["b"][:1] for r in rows) / n,
            "same_top": sum(r["a"] == r["b"] for r in rows) / n,
            "changed": changed[:shown]}
