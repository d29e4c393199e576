"""Metadata filters: checking one given as JSON, and merging a query's own filter with a global one.

A filter maps a metadata field to a value or a list of values (exact match; a list means
any of them). Batch queries may carry their own (``{"text": ..., "filter": {"group": "q7"}}``),
which is merged with the command's ``--filter``: fields of either apply, and a field named
by both keeps only the values both allow (so a per-query filter can narrow the global one but
never widen it). An empty intersection matches no document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.types import Filters

_SCALARS = (str, int, float)


def filter_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid filter object, or ``None`` when it is."""
    if not isinstance(value, Mapping):
        return f'"filter" must be an object like {{"group": "q7"}}, found {type(value).__name__}'
    for field, allowed in value.items():
        values = allowed if isinstance(allowed, list) else [allowed]
        if not values or not all(isinstance(v, _SCALARS) and not isinstance(v, bool) for v in values):
            return (f'"filter" field {field!r} must be a string, a number or a non-empty list of them, '
                    f"found {allowed!r}")
    return None


def _values(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def merge_filters(base: Filters | None, extra: Filters | None) -> dict[str, Any] | None:
    """``base`` and ``extra`` combined (module docstring); inputs are not modified. Values
    are compared as strings, as metadata keywords are."""
    if not base and not extra:
        return None
    merged: dict[str, Any] = dict(base or {})
    for field, value in (extra or {}).items():
        if field not in merged:
            merged[field] = value
            continue
        allowed = {str(v) for v in _values(merged[field])}
        both = [v for v in _values(value) if str(v) in allowed]
        merged[field] = both[0] if len(both) == 1 else both
    return merged


def parse_filter_items(items, *, sep: str = "=", option: str = "--filter") -> dict[str, Any] | None:
    """``("topic=a", "topic=b", "lang=en")`` -> ``{"topic": ["a", "b"], "lang": "en"}``: the
    command line's ``--filter FIELD=VALUE`` and the workbench API's ``filter=FIELD:VALUE``
    (``sep``); ``option`` names the source in the error."""
    filters: dict[str, Any] = {}
    for item in items:
        field, found, value = item.partition(sep)
        if not found or not field.strip():
            raise ConfigError(f"{option} {item!r}: expected FIELD{sep}VALUE, e.g. {option} topic{sep}account")
        field = field.strip()
        if field in filters:
            previous = filters[field]
            filters[field] = (previous if isinstance(previous, list) else [previous]) + [value]
        else:
            filters[field] = value
    return filters or None
