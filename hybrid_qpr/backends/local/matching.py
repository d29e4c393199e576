"""Metadata filters on a local index: which live rows of each segment match.

Filters (``{"field": value}`` or ``{"field": [v1, v2]}``) match metadata exactly, compared
as text: strings as they are, numbers as JSON writes them (``3``, ``1.5``), booleans as
``true``/``false`` (so ``--filter flag=true`` matches JSON ``true``), and a list-valued
field matches when any element does. Several values for one field mean any of them;
several fields must all match. A field that no document has is refused with the known
fields listed. Filters select the matching rows first; BM25 ranks only those and kNN is
exact over them, so ``depth`` hits come back whenever that many documents match.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.types import Filters

if TYPE_CHECKING:
    from hybrid_qpr.backends.local.segment import Segment



def _value_text(row: str) -> str:
    """SQL for the text of one metadata value of the ``json_each`` row ``row``: booleans as
    true/false, numbers and strings as SQLite prints them."""
    return (f"CASE {row}.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
            f"ELSE CAST({row}.value AS TEXT) END")


# A field is found by its key among the top-level members (never through a JSON path, where SQLite
# gives '"' and '\' in a key no escape); a list (or object) value matches when an element does.
_FIELD_MATCHES = ("EXISTS (SELECT 1 FROM json_each(metadata) AS f WHERE f.key = ? AND ("
                  "(f.type NOT IN ('array', 'object') AND " + _value_text("f") + " IN ({values})) OR EXISTS ("
                  "SELECT 1 FROM json_each(CASE WHEN f.type IN ('array', 'object') THEN f.value ELSE '[]' END) AS e "
                  "WHERE " + _value_text("e") + " IN ({values}))))")


def filter_value(value: Any) -> str:
    """A filter value as the text it is compared with (see the module docstring)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def metadata_problem(metadata: dict[str, Any]) -> str | None:
    """Why a document's ``metadata`` cannot be stored so that filters find it, or ``None``:
    SQLite's JSON functions end a key at a NUL character, so ``"a\\u0000b"`` would read as ``"a"``."""
    for key in metadata:
        if "\x00" in str(key):
            return (f"metadata key {key!r} holds the NUL character, which a filter could never match (the index "
                    "reads a key only up to it); rename the key in the source")
    return None


def index_fields(segments: Sequence["Segment"]) -> list[str]:
    """Metadata fields present in any of ``segments`` (what filters can name)."""
    return sorted({f for s in segments for f in s.entry.get("fields", [])})


def matching_rows(segments: Sequence["Segment"], filters: Filters, index_path: Path) -> list[np.ndarray]:
    """Per segment, the live rows matching ``filters`` (a field no document has is refused)."""
    known = set(index_fields(segments))
    unknown = [f for f in filters if str(f) not in known]
    if unknown:
        listed = ", ".join(sorted(known)) if known else "none (the documents have no metadata)"
        raise ConfigError(f"filter field {unknown[0]!r} is not in any document of index {index_path}; "
                          f"known fields: {listed}")
    clauses, params = [], []
    for field, value in filters.items():
        values = list(value) if isinstance(value, (list, tuple, set)) else [value]
        values = [v for v in values if v is not None]
        if not values:
            return [np.zeros(0, dtype=np.int64) for _ in segments]
        texts = [filter_value(v) for v in values]
        clauses.append(_FIELD_MATCHES.format(values=", ".join("?" * len(texts))))
        params.extend([str(field), *texts, *texts])
    out = []
    for seg in segments:
        rows = np.fromiter((r[0] for r in seg.sql(f"SELECT pos FROM docs WHERE {' AND '.join(clauses)} ORDER BY pos",
                                                  params)), dtype=np.int64)
        if seg.deleted is not None:
            rows = rows[~seg.deleted[rows]]
        out.append(rows)
    return out
