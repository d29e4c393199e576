"""Business signals after fusion: the fused score plus per-field boosts and a decay on one
metadata field (recency or popularity), as a formula applied to each hit's metadata.

``final = fused + sum(boost_f * value_f) + weight * decay(value_of_field)``

The formula runs in the searcher after fusion, on the metadata every backend returns with a
hit, so the embedded index, OpenSearch and Elasticsearch rank alike. A missing or unreadable
field contributes 0.

Decay functions (Elasticsearch's ``exp``, ``gauss`` and ``linear``): with
``d = max(0, |value - origin| - offset)``, a hit at ``d = scale`` decays to ``decay``:

* ``exp``: ``decay ** (d / scale)``;
* ``gauss``: ``decay ** ((d / scale) ** 2)`` (Elasticsearch's ``exp(-d^2 / 2 sigma^2)``);
* ``linear``: ``max(0, 1 - (1 - decay) * d / scale)``.

The field holds numbers or dates. A date (ISO 8601, e.g. ``2024-05-01`` or
``2024-05-01T12:00:00Z``) is read as seconds since the epoch; for a date field ``origin``
is a date or ``now`` and ``scale``/``offset`` are durations (``30d``, ``12h``, ``15m``,
``45s``, ``2w``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal, get_args

from hybrid_qpr.errors import ConfigError

DecayFunction = Literal["exp", "gauss", "linear"]
DECAY_FUNCTIONS: tuple[str, ...] = get_args(DecayFunction)
DEFAULT_DECAY = 0.5
# Signal weights ``tune --signal-weights`` tries by default.
SIGNAL_WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.5)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def _as_number(value: Any) -> float | None:
    """A metadata value as a number: numbers as they are, ISO dates as epoch seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    return None


def _length(text: Any, where: str) -> float:
    """A scale or offset: a number, or a duration such as ``30d`` (in seconds)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _DURATION.match(str(text))
    if match:
        return float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{where}={text!r}: expected a number or a duration such as 30d, 12h, 15m") from None


@dataclass(frozen=True)
class Decay:
    """A decay on ``field`` around ``origin`` (a number, a date, or ``now``)."""

    field: str
    function: DecayFunction = "exp"
    origin: str | float = "now"
    scale: str | float = 1.0
    offset: str | float = 0.0
    decay: float = DEFAULT_DECAY

    def __post_init__(self) -> None:
        if not self.field:
            raise ConfigError("decay field: name the metadata field to decay on")
        if self.function not in DECAY_FUNCTIONS:
            raise ConfigError(f"decay function={self.function!r}: allowed values are {', '.join(DECAY_FUNCTIONS)}")
        if not (isinstance(self.decay, (int, float)) and 0.0 < float(self.decay) < 1.0):
            raise ConfigError(f"decay={self.decay!r}: must be a number strictly between 0 and 1")
        if self._scale() <= 0:
            raise ConfigError(f"decay scale={self.scale!r}: must be > 0")
        if self._offset() < 0:
            raise ConfigError(f"decay offset={self.offset!r}: must be >= 0")
        if self.origin != "now" and _as_number(self.origin) is None:
            raise ConfigError(f"decay origin={self.origin!r}: expected a number, a date (2024-05-01) or now")

    def _scale(self) -> float:
        return _length(self.scale, "decay scale")

    def _offset(self) -> float:
        return _length(self.offset, "decay offset")

    def origin_value(self, now: float | None = None) -> float:
        if self.origin == "now":
            return datetime.now(timezone.utc).timestamp() if now is None else now
        return _as_number(self.origin)  # type: ignore[return-value]

    def value(self, raw: Any, origin: float) -> float:
        """The decay factor in [0, 1] of a metadata value (0 where it is missing or unreadable)."""
        number = _as_number(raw)
        if number is None:
            return 0.0
        scale, distance = self._scale(), max(0.0, abs(number - origin) - self._offset())
        if self.function == "exp":
            return float(self.decay) ** (distance / scale)
        if self.function == "gauss":
            return float(self.decay) ** ((distance / scale) ** 2)
        return max(0.0, 1.0 - (1.0 - float(self.decay)) * distance / scale)


@dataclass(frozen=True)
class Contribution:
    """What the formula added to one hit: per boosted field and the decay (weighted)."""

    boosts: dict[str, float]
    decay: float

    @property
    def total(self) -> float:
        return sum(self.boosts.values()) + self.decay


@dataclass(frozen=True)
class Signals:
    """The formula: ``boosts`` (metadata field -> weight of its numeric value) and an optional
    ``decay`` weighted by ``weight``."""

    boosts: Mapping[str, float] = field(default_factory=dict)
    decay: Decay | None = None
    weight: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight)):
            raise ConfigError(f"signal weight={self.weight!r}: must be a finite number")
        for name, boost in self.boosts.items():
            if not (isinstance(boost, (int, float)) and math.isfinite(boost)):
                raise ConfigError(f"boost {name}={boost!r}: must be a finite number")

    def __bool__(self) -> bool:
        return bool(self.boosts) or (self.decay is not None and self.weight != 0.0)

    def with_weight(self, weight: float) -> "Signals":
        return replace(self, weight=float(weight))

    def contributions(self, metadata: Mapping[str, Any], origin: float | None = None) -> Contribution:
        """The formula's terms for one hit (``origin``: the decay's origin, fixed per search)."""
        boosts = {}
        for name, boost in self.boosts.items():
            number = _as_number(metadata.get(name))
            boosts[name] = 0.0 if number is None else boost * number
        decay = 0.0
        if self.decay is not None and self.weight:
            start = self.decay.origin_value() if origin is None else origin
            decay = self.weight * self.decay.value(metadata.get(self.decay.field), start)
        return Contribution(boosts, decay)

    def origin(self) -> float | None:
        """The decay's origin for one search (``now`` read once, so every hit decays from it)."""
        return None if self.decay is None else self.decay.origin_value()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weight": self.weight, "boosts": dict(self.boosts)}
        if self.decay is not None:
            d = self.decay
            out["decay"] = {"field": d.field, "function": d.function, "origin": d.origin, "scale": d.scale,
                            "offset": d.offset, "decay": d.decay}
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "signals") -> "Signals":
        """The ``as_dict`` form (stored with tuned defaults), checked."""
        if not isinstance(data, dict) or set(data) - {"weight", "boosts", "decay"}:
            raise ConfigError(f"{where}: expected an object with weight, boosts and decay, found {data!r}")
        decay = data.get("decay")
        if decay is not None:
            if not isinstance(decay, dict) or "field" not in decay or set(decay) - {
                    "field", "function", "origin", "scale", "offset", "decay"}:
                raise ConfigError(f"{where}.decay: expected field, function, origin, scale, offset, decay; found {decay!r}")
            decay = Decay(**decay)
        boosts = data.get("boosts") or {}
        if not isinstance(boosts, dict):
            raise ConfigError(f"{where}.boosts: expected an object field -> weight, found {boosts!r}")
        return cls(boosts, decay, data.get("weight", 0.0))


def parse_decay(text: str) -> Decay:
    """``FIELD:FUNCTION:SCALE[:ORIGIN[:OFFSET[:DECAY]]]`` (the CLI's ``--decay``), e.g.
    ``created:exp:30d`` (origin now, offset 0, decay 0.5) or ``views:gauss:1000:5000:0:0.3``."""
    parts = _split_keeping_times(str(text))
    if len(parts) < 3 or len(parts) > 6:
        raise ConfigError(f"--decay {text!r}: expected FIELD:FUNCTION:SCALE[:ORIGIN[:OFFSET[:DECAY]]], "
                          "e.g. created:exp:30d")
    field_name, function, scale, *rest = parts
    origin = rest[0] if len(rest) > 0 and rest[0] else "now"
    offset = rest[1] if len(rest) > 1 and rest[1] else 0.0
    try:
        decay = float(rest[2]) if len(rest) > 2 and rest[2] else DEFAULT_DECAY
    except ValueError:
        raise ConfigError(f"--decay {text!r}: decay {rest[2]!r} is not a number in (0, 1)") from None
    return Decay(field_name, function, origin, scale, offset, decay)  # type: ignore[arg-type]


def _split_keeping_times(text: str) -> list[str]:
    """``split(":")`` that keeps an ISO time (``2024-05-01T12:00:00Z``) in one part."""
    parts: list[str] = []
    for piece in text.split(":"):
        if parts and re.search(r"T\d{2}$|T\d{2}:\d{2}$", parts[-1]) and re.match(r"^\d{2}", piece):
            parts[-1] += ":" + piece
        else:
            parts.append(piece)
    return parts


def parse_boost(text: str) -> tuple[str, float]:
    """``FIELD=WEIGHT`` (the CLI's ``--boost``), e.g. ``votes=0.01``."""
    name, sep, weight = str(text).partition("=")
    try:
        number = float(weight)
    except ValueError:
        number = math.nan
    if not sep or not name or not math.isfinite(number):
        raise ConfigError(f"--boost {text!r}: expected FIELD=WEIGHT, e.g. votes=0.01")
    return name, number
