"""Command-line options for fusion beyond method and alpha: min-max bounds, business signals
(boosts and a decay) and autocut, read into the library's ``Bounds`` and ``Signals``."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import FiniteFloatRange
from hybrid_qpr.fusion import BOUND_MODES, LIST_NAMES, check_bounds
from hybrid_qpr.signals import DECAY_FUNCTIONS, Signals, parse_boost, parse_decay

DEFAULT_SIGNAL_WEIGHT = 1.0

BOUND_HELP = (f"LIST=MODE:VALUE with LIST one of {', '.join(LIST_NAMES)} and MODE one of {', '.join(BOUND_MODES)}: "
              "fixes that end of the list's min-max range (--fusion minmax; repeatable), e.g. knn=clip:0.3. "
              "apply: used where it lies beyond the list's own; clip: always, scores beyond it count as the bound. "
              "[default: the index's tuned bounds for minmax, else none]")


def bounds_option(side: str):
    return click.option(f"--{side}-bound", f"{side}_bounds", multiple=True, metavar="LIST=MODE:VALUE",
                        help=f"{side.capitalize()} bound: {BOUND_HELP}")


def signal_options(func):
    """``--boost``, ``--decay`` and ``--signal-weight`` (business signals after fusion)."""
    func = click.option("--signal-weight", type=FiniteFloatRange(), default=None,
                        help=f"Weight of the --decay term added to the fused score. [default: the index's tuned "
                             f"weight with the tuned decay, else {DEFAULT_SIGNAL_WEIGHT}]")(func)
    func = click.option("--decay", default=None, metavar="FIELD:FUNCTION:SCALE[:ORIGIN[:OFFSET[:DECAY]]]",
                        help=f"Recency or popularity after fusion: adds weight x decay of the metadata FIELD (a date or "
                             f"number), FUNCTION one of {', '.join(DECAY_FUNCTIONS)}, a hit SCALE (+ OFFSET) from ORIGIN "
                             "gets DECAY (0.5). Dates: ORIGIN a date or now (default), SCALE a duration (30d, 12h). "
                             "E.g. created:exp:30d or views:linear:1000:5000")(func)
    func = click.option("--boost", "boosts", multiple=True, metavar="FIELD=WEIGHT",
                        help="Adds WEIGHT x the numeric metadata FIELD to the fused score (repeatable), e.g. votes=0.001.")(func)
    return func


def read_fusion_extras(lower_bounds, upper_bounds, boosts, decay, signal_weight):
    """The options as ``(bounds, signals)``; ``None`` where none was given (the index's tuned
    ones apply then)."""
    bounds: dict[str, dict[str, str]] = {}
    for side, given in (("lower", lower_bounds), ("upper", upper_bounds)):
        for text in given:
            name, sep, bound = text.partition("=")
            if not sep:
                raise click.BadParameter(f"{text!r}: expected LIST=MODE:VALUE, e.g. knn=clip:0.3",
                                         param_hint=f"--{side}-bound")
            bounds.setdefault(name, {})[side] = bound
    checked = check_bounds(bounds, "--lower-bound/--upper-bound") if bounds else None
    if not boosts and decay is None:
        if signal_weight is not None:
            raise click.UsageError("--signal-weight weighs the --decay term: give --decay too")
        return checked, None
    weight = DEFAULT_SIGNAL_WEIGHT if signal_weight is None else signal_weight
    signals = Signals(dict(parse_boost(b) for b in boosts), None if decay is None else parse_decay(decay), weight)
    return checked, signals


def explanation(results, offset: int = 0) -> str:
    """Each hit's score and what it is made of: the fused score, each list's score and rank,
    and each business signal's contribution (``query --explain``)."""
    lines = []
    for rank, r in enumerate(results, start=offset + 1):
        lines.append(f"{rank}. {r.id}  score {r.score:.6g}")
        if r.fused_score is not None:
            lines.append(f"   fused        {r.fused_score:.6g}")
        for name, part in (("BM25", r.bm25), ("kNN", r.knn)):
            lines.append(f"   {name:<12} " + ("- (not in this list)" if part is None else
                                            f"{part.score:.6g} (rank {part.rank})"))
        for name, value in (r.signals or {}).items():
            lines.append(f"   {name:<12} {value:+.6g}")
        if r.cross_encoder is not None:
            lines.append(f"   cross-encoder {r.cross_encoder.score:.6g} (rank {r.cross_encoder.rank}, "
                         f"first stage {r.first_stage_rank})")
    return "\n".join(lines)


def read_bound_grid(given) -> list[dict[str, dict[str, str]]]:
    """``tune --lower-bound-grid LIST=MODE:V1,V2,...`` as one bounds setting per value."""
    settings = []
    for text in given:
        name, sep, spec = text.partition("=")
        mode, colon, values = spec.partition(":")
        if not (sep and colon and values):
            raise click.BadParameter(f"{text!r}: expected LIST=MODE:V1,V2,..., e.g. knn=clip:0.2,0.4",
                                     param_hint="--lower-bound-grid")
        for value in values.split(","):
            setting = {name: {"lower": f"{mode}:{value.strip()}"}}
            check_bounds(setting, "--lower-bound-grid")
            settings.append(setting)
    return settings
