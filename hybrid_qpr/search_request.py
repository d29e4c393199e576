"""One search as every surface asks for it: the modes, ``SearchRequest`` (keyword-only and
immutable), ``SEARCH_OPTIONS`` (each option declared once: name, type, range, help, default)
and ``resolve``, the one place the index's tuned defaults fill what a request leaves open.

The CLI's ``query`` turns ``SEARCH_OPTIONS`` into its options and the workbench into its
OpenAPI parameters and its query-string parser, so an option added here reaches both; each
surface builds a ``SearchRequest`` and ``HybridSearcher.run`` answers with the results and the
resolved request, so ``query --json`` and the workbench show the settings that were used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hybrid_qpr import fusion as fusion_lib
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.signals import Signals
from hybrid_qpr.types import Filters, QueryVector

# The one list of modes, in the order reports and the workbench show them; every surface
# (CLI choices, evaluation, the workbench and its OpenAPI) reads MODES.
Mode = Literal["bm25", "knn", "hybrid", "rescore"]
MODES: tuple[str, ...] = get_args(Mode)
DEFAULT_MODE: Mode = "hybrid"
# Names a mode had before; accepted everywhere a mode is (CLI, API, library) and read as the new one.
MODE_ALIASES: dict[str, str] = {"rerank": "rescore"}
ACCEPTED_MODES: tuple[str, ...] = (*MODES, *MODE_ALIASES)
# The two first-stage lists and their fusion: the modes tuning and its before/after compare.
FUSION_MODES: tuple[str, ...] = ("bm25", "knn", "hybrid")
DEFAULT_TOP_K = 10
DEFAULT_DEPTH = fusion_lib.DEFAULT_DEPTH  # candidates per list (see hybrid_qpr.fusion)
RESCORE_DEPTH = fusion_lib.RESCORE_DEPTH
DEFAULT_FUSION, DEFAULT_ALPHA = fusion_lib.DEFAULT_FUSION, fusion_lib.DEFAULT_ALPHA


def check_mode(mode: str) -> Mode:
    """``mode`` as one of ``MODES`` (an old name from ``MODE_ALIASES`` read as its new one)."""
    mode = MODE_ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r}: allowed values are {', '.join(MODES)}")
    return mode  # type: ignore[return-value]


@dataclass(frozen=True)
class SearchOption:
    """One option of a search, declared once for every surface: ``name`` is the
    ``SearchRequest`` field, ``kind`` its type (int, float, str or bool); ``default`` ``None``
    leaves it to ``resolve`` (``resolved`` says to what). ``flags``: the CLI's names (default
    ``--name-with-dashes``); ``param``: the API's query parameter (default ``name``)."""

    name: str
    kind: type
    help: str
    default: Any = None
    resolved: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    param: str = ""
    range_note: str = ""  # said after a range error, e.g. what 0 means

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def api_name(self) -> str:
        return self.param or self.name

    def described(self) -> str:
        """The help with its default: the value, or what ``resolve`` falls back on."""
        if self.resolved:
            return f"{self.help} [default: {self.resolved}]"
        return self.help

    def check(self, value: Any) -> Any:
        """``value`` checked against this option's range or choices (a ``ConfigError`` naming it)."""
        if value is None or self.kind is bool:
            return value
        if self.name == "mode":
            return check_mode(value)
        if self.name == "fusion":
            return fusion_lib.check_fusion(value)
        if self.name == "alpha":
            return fusion_lib.check_alpha(value)
        if self.choices and value not in self.choices:
            raise ConfigError(f"{self.name}={value!r}: allowed values are {', '.join(self.choices)}")
        note = f" {self.range_note}" if self.range_note else ""
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}={value}: must be >= {self.minimum}{note}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.name}={value}: must be <= {self.maximum}{note}")
        return value


SEARCH_OPTIONS: tuple[SearchOption, ...] = (
    SearchOption("mode", str, "hybrid fuses BM25 and kNN; rescore is the MSEM baseline (BM25's top rescore-depth "
                              "hits re-scored by the encoder; 'rerank', its name before, still works).",
                 default=DEFAULT_MODE, choices=MODES),
    SearchOption("top_k", int, "Results per query (per page).", default=DEFAULT_TOP_K, minimum=1,
                 flags=("-k", "--top-k"), param="k"),
    SearchOption("offset", int, "Skip this many results (pagination): from 10 with 10 results is page 2.",
                 default=0, minimum=0, flags=("--from",)),
    SearchOption("fusion", str, "Hybrid fusion method.", choices=fusion_lib.FUSION_METHODS,
                 resolved=f"the index's tuned value ('hybrid-qpr tune'), else {DEFAULT_FUSION}"),
    SearchOption("alpha", float, "Weight of kNN in the fusion, BM25 gets 1 - alpha.", minimum=0, maximum=1,
                 resolved=f"the tuned value, else {DEFAULT_ALPHA}"),
    SearchOption("depth", int, "Candidates taken from each list before fusion.", minimum=1,
                 resolved=f"the tuned depth, else {DEFAULT_DEPTH}; at least from + k"),
    SearchOption("autocut", int, "Hybrid: drop the results after the deepest of the N largest gaps between "
                                 "neighbouring scores (1: cut at the largest gap; never the top hit; 0: off).",
                 default=0, minimum=0, range_note="(0 = off)"),
    SearchOption("rescore_depth", int, "BM25 candidates re-scored in rescore mode.", default=RESCORE_DEPTH,
                 minimum=1, flags=("--rescore-depth", "--rerank-depth")),
    SearchOption("server_side", bool, "OpenSearch only: fuse (hybrid, with the same fusion, alpha and depth) or "
                                      "re-score inside the cluster.", default=False),
)
OPTIONS_BY_NAME: dict[str, SearchOption] = {option.name: option for option in SEARCH_OPTIONS}




def _default(name: str) -> Any:
    """The declared default of option ``name``: the request's field takes it from there."""
    return OPTIONS_BY_NAME[name].default


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    """One search. As a surface builds it, ``None`` leaves a setting to the index's tuned
    defaults; ``resolve`` fills them in (``fusion``, ``alpha``, ``depth``, ``bounds`` and
    ``signals`` from the tuned ones in the hybrid mode, the one that fuses; the package
    defaults elsewhere). ``depth`` is the candidates per list before the page is counted in
    (``list_depth``); ``vector`` the query's encoding, computed on first use;
    ``reranker_depth`` ``None`` is the searcher's, 0 no cross-encoder. The declared options'
    fields take their defaults from ``SEARCH_OPTIONS``."""

    text: str
    mode: str = _default("mode")
    top_k: int = _default("top_k")
    offset: int = _default("offset")
    filters: Filters | None = None
    fusion: str | None = _default("fusion")
    alpha: float | None = _default("alpha")
    depth: int | None = _default("depth")
    rescore_depth: int = _default("rescore_depth")
    reranker_depth: int | None = None
    server_side: bool = _default("server_side")
    vector: QueryVector | None = None
    bounds: Mapping[str, fusion_lib.Bounds] | None = None  # min-max bounds by list name
    signals: Signals | None = None
    autocut: int = _default("autocut")  # jumps (fusion.autocut); 0: off

    @property
    def need(self) -> int:
        """Results the mode must rank: every page up to this one's end."""
        return self.offset + self.top_k

    @property
    def list_depth(self) -> int:
        """Candidates per list for a hybrid search: ``depth``, never less than ``need``."""
        return max(self.depth or DEFAULT_DEPTH, self.need)

    def replace(self, **changes: Any) -> "SearchRequest":
        """This request with ``changes`` (field by name). Copies the fields' values rather than
        calling ``dataclasses.replace``, which costs a tenth of a BM25 query on every search."""
        unknown = changes.keys() - _FIELDS
        if unknown:
            raise TypeError(f"SearchRequest has no field {', '.join(sorted(unknown))}")
        return self._with(changes)

    def _with(self, changes: Mapping[str, Any]) -> "SearchRequest":
        new = object.__new__(SearchRequest)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def first_stage(self) -> "SearchRequest":
        """The request a reranker re-orders: the top ``max(need, reranker_depth)`` from rank 1."""
        return self.replace(top_k=max(self.need, self.reranker_depth or 0), offset=0)

    def settings(self) -> dict[str, Any]:
        """The settings as JSON (``query --json``'s and the workbench's ``request``): every
        declared option, the filters, bounds and signals, the reranker's depth; not the text
        or the encoding."""
        out: dict[str, Any] = {option.name: getattr(self, option.name) for option in SEARCH_OPTIONS}
        out.update(filters=None if self.filters is None else dict(self.filters),
                   bounds={name: bound.as_dict() for name, bound in fusion_lib.check_bounds(self.bounds).items()} or None,
                   signals=None if self.signals is None else self.signals.as_dict(),
                   reranker_depth=self.reranker_depth, list_depth=self.list_depth)
        return out


_FIELDS = frozenset(field.name for field in dataclasses.fields(SearchRequest))
# (name, default, its type, check) of each option: what resolve walks on every search
_CHECKS = tuple((option.name, option.default, type(option.default), option.check) for option in SEARCH_OPTIONS)


def search_defaults() -> dict[str, Any]:
    """What a request falls back on where neither it nor the index's tuning says (the page shows it)."""
    return {"mode": DEFAULT_MODE, "top_k": DEFAULT_TOP_K, "fusion": DEFAULT_FUSION, "alpha": DEFAULT_ALPHA,
            "depth": DEFAULT_DEPTH}


def resolve(request: SearchRequest, tuned: Mapping[str, Any], *, reranker_depth: int = 0) -> SearchRequest:
    """``request`` checked (a ``ConfigError`` names the bad setting) with every open setting
    filled: explicit values win; in the hybrid mode the index's ``tuned`` defaults come next
    (alpha only with the tuned fusion; bounds and signals only with it, as they were tuned on
    its scores); else the package defaults. ``reranker_depth``: the searcher's (0 without a
    reranker; then the request's own is ignored)."""
    values, checked = request.__dict__, {}
    for name, default, kind, check in _CHECKS:  # a declared default is valid: only other values are checked
        value = values[name]
        checked[name] = value if value is None or (value == default and type(value) is kind) else check(value)
    mode = checked["mode"]
    if request.reranker_depth is not None and request.reranker_depth < 0:
        raise ConfigError(f"reranker_depth={request.reranker_depth}: must be >= 0 (0: no reranking for this search)")
    tuned = tuned if mode == "hybrid" else {}  # the one mode that fuses takes the tuned settings
    fusion = fusion_lib.check_fusion(checked["fusion"] or tuned.get("fusion") or DEFAULT_FUSION)
    alpha = checked["alpha"]
    if alpha is None:
        alpha = tuned.get("alpha", DEFAULT_ALPHA) if fusion == tuned.get("fusion", fusion) else DEFAULT_ALPHA
    depth = checked["depth"] or int(tuned.get("depth") or DEFAULT_DEPTH)
    bounds, signals = fusion_extras(fusion, request.bounds, request.signals, tuned)
    cut = 0 if not reranker_depth else reranker_depth if request.reranker_depth is None else request.reranker_depth
    checked.update(fusion=fusion, alpha=fusion_lib.check_alpha(alpha), depth=depth, bounds=bounds, signals=signals,
                   reranker_depth=cut)
    return request._with(checked)


def fusion_extras(fusion: str, bounds: Mapping | None, signals: Signals | Mapping | None,
                  tuned: Mapping[str, Any]) -> tuple[dict[str, fusion_lib.Bounds], Signals | None]:
    """Min-max ``bounds`` and business ``signals``: explicit ones win; else the ``tuned`` ones
    when ``fusion`` is the tuned method (a signal weight is tuned on its fused scores' scale)."""
    if bounds is None and signals is None and "bounds" not in tuned and "signals" not in tuned:
        return {}, None  # the usual search: nothing to check
    if bounds is None and fusion == tuned.get("fusion"):
        bounds = tuned.get("bounds")
    if signals is None and tuned.get("signals") is not None and fusion == tuned.get("fusion"):
        signals = tuned["signals"]
    checked = fusion_lib.check_bounds(bounds)
    if checked and fusion != "minmax":
        raise ConfigError(f"bounds apply to minmax fusion only, not {fusion}")
    if signals is not None and not isinstance(signals, Signals):
        signals = Signals.from_dict(signals)
    return checked, (signals or None)
