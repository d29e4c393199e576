"""Metadata filters: checking one given as JSON, and merging a query's own filter with a global one.

A filter maps a metadata field to a value or a list of values (exact match; a list means
any of them). Batch queries may carry their own (``{"text": ..., "filter": {"group": "q7"}}``),
which is merged with the command's ``--filter``: fields of either apply, and a field named
by both keeps only the values both allow (so a per-query filter can narrow the global one but
never widen it). An empty intersection matches no document.

Written as text (the command line's ``--filter``, the workbench's ``filter=`` parameter) a
filter is ``FIELD=VALUE``, everywhere; ``parse_filter_items`` is the one parser.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.types import Filters

_SCALARS = (str, int, float)
logger = logging.getLogger(__name__)
_warned_old_form = False


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


def parse_filter_items(items: Iterable[str], *, option: str = "--filter",
                       accept_colon: bool = False) -> dict[str, Any] | None:
    """``("topic=a", "topic=b", "lang=en")`` -> ``{"topic": ["a", "b"], "lang": "en"}``: the
    command line's ``--filter FIELD=VALUE`` and the workbench API's ``filter=FIELD=VALUE``;
    ``option`` names the source in the error. ``accept_colon`` also takes the API's former
    ``FIELD:VALUE`` (an item without "="), with a deprecation note in the log."""
    filters: dict[str, Any] = {}
    for item in items:
        field, found, value = item.partition("=")
        if not found and accept_colon and ":" in item:
            field, found, value = item.partition(":")
            _note_old_form(item, option)
        if not found or not field.strip():
            example = f"{option}=topic=account" if option.isidentifier() else f"{option} topic=account"
            raise ConfigError(f"{option} {item!r}: expected FIELD=VALUE, e.g. {example}")
        field = field.strip()
        if field in filters:
            previous = filters[field]
            filters[field] = (previous if isinstance(previous, list) else [previous]) + [value]
        else:
            filters[field] = value
    return filters or None


def _note_old_form(item: str, option: str) -> None:
    global _warned_old_form
    if not _warned_old_form:
        _warned_old_form = True
        logger.warning("%s %r: FIELD:VALUE is deprecated, write FIELD=VALUE (%s)", option, item,
                       item.replace(":", "=", 1))
