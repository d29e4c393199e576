"""Documents to index, from the file formats users have: the reader behind ``hybrid-qpr ingest``.

Formats (``fmt="auto"`` decides from the extension, else from the first line):

* ``jsonl`` - one object per line with ``id`` and ``text`` (names set by ``id_column`` /
  ``text_column``); every other key becomes metadata (usable in filters). A BEIR
  ``corpus.jsonl`` (``_id``, ``title``, ``text``) is read the same way: ``_id`` is the id,
  a non-empty ``title`` is kept as metadata.
* ``table`` - TSV or CSV (optionally gzipped) whose header names the text column (and
  optionally the id column); other columns become metadata.
* ``pairs`` - a Quora-layout pairs file (or a two-column paraphrase TSV), read by
  ``hybrid_qpr.data.pairs.iter_pairs``; each distinct question becomes one document
  (id = its qid). Chosen automatically when a table's header names question1/question2.
* ``-`` reads stdin (the format is sniffed from the first line).

A record without an id gets the stable id of :func:`hybrid_qpr.text.text_id` (the rule
``dataset build`` uses too), so ingesting the same file twice updates instead of duplicating,
and a pairs file without qids is indexed under the ids of the qrels built from it.

Bad lines go to a ``BadLines`` collector (``hybrid_qpr.errors``): strict by default
(``InputError(path, line, problem)``), or skipped and recorded with ``BadLines("skip")``. A
line that is not valid UTF-8 is a bad line like any other (in JSONL and TSV/CSV input; a
table's header must be readable).
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from hybrid_qpr.types import Document
from hybrid_qpr.artifacts import (base_suffix, display_name, iter_jsonl, iter_rows, open_text, read_json_line,
                                  skip_undecodable)
from hybrid_qpr.errors import BadLines, ConfigError, InputError
from hybrid_qpr.text import text_id
from hybrid_qpr.text.ids import id_problem

logger = logging.getLogger(__name__)

DocumentFormat = Literal["auto", "jsonl", "table", "pairs"]
FORMATS: tuple[str, ...] = get_args(DocumentFormat)


def _first_line(path: str | Path) -> str:
    """The first line of ``path`` without consuming stdin (peeked from its buffer)."""
    if str(path) == "-":
        peeked = sys.stdin.buffer.peek(65536)
        return peeked.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    with open_text(path) as fh:
        return fh.readline()


def detect_format(path: str | Path) -> DocumentFormat:
    """``jsonl`` for .jsonl/.json files or a first line starting with ``{`` (or ``[``); ``pairs`` for a
    table whose header names question1 and question2 (or a 6-column Quora file); else ``table``."""
    suffix = base_suffix(path)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    first = _first_line(path)
    if first.lstrip().startswith(("{", "[")):  # "[": a JSON array, refused by the JSONL reader with that name
        return "jsonl"
    cells = [c.strip().strip('"').lower() for c in first.replace("\t", ",").split(",")]
    if {"question1", "question2"} <= set(cells):
        return "pairs"
    return "table"


def iter_documents(path: str | Path, *, text_column: str = "text", id_column: str = "id",
                   fmt: DocumentFormat = "auto", bad_lines: BadLines | None = None,
                   generated_ids: list[int] | None = None) -> Iterator[tuple[int, Document]]:
    """Yield ``(line number, Document)`` from ``path`` (see the module docstring). The line of
    each document given an id derived from its text is appended to ``generated_ids``."""
    bad_lines = bad_lines or BadLines()
    generated = [] if generated_ids is None else generated_ids
    if fmt not in FORMATS:
        raise ConfigError(f"fmt={fmt!r}: allowed values are {', '.join(FORMATS)}")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "jsonl":
        yield from _jsonl(path, text_column, id_column, bad_lines, generated)
    elif fmt == "pairs":
        yield from _pairs(path, bad_lines, generated)
    else:
        yield from _table(path, text_column, id_column, bad_lines, generated)


def _document(record: dict[str, Any], text_column: str, id_column: str,
              text_option: str | None = "--text-column") -> Document | str:
    """A Document from one record, or the problem with it (naming ``text_option``, the option
    that names the text field, when the record has other text fields)."""
    text = record.get(text_column)
    if not isinstance(text, str) or not text.strip():
        shown = "missing" if text is None else f"{type(text).__name__} {str(text)[:40]!r}"
        others = [k for k, v in record.items() if isinstance(v, str) and v.strip() and k not in (id_column, "_id")][:4]
        hint = (f"; if the text is in another field ({', '.join(map(repr, others))}), name it with {text_option}"
                if text is None and others and text_option else "")
        return f"field {text_column!r} must be a non-empty string (found {shown}){hint}"
    id_key, raw_id = _given_id(record, id_column)
    if raw_id is None:
        doc_id = text_id(text)
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool):
        doc_id = str(raw_id)
        problem = id_problem(doc_id)
        if problem:
            return problem
    else:
        return f"field {id_key!r} must be a string or an integer (found {type(raw_id).__name__})"
    metadata = {k: v for k, v in record.items() if k not in (text_column, id_key) and not (k == "title" and v == "")}
    return Document(doc_id, text, metadata)


def _given_id(record: dict[str, Any], id_column: str) -> tuple[str | None, Any]:
    """The key holding ``record``'s id and its value; the value is ``None`` when the record
    carries none (then the id is derived from the text)."""
    id_key = id_column if id_column in record else ("_id" if id_column == "id" and "_id" in record else None)
    raw_id = record.get(id_key) if id_key else None
    return id_key, None if isinstance(raw_id, str) and not raw_id.strip() else raw_id


def _jsonl(path, text_column, id_column, bad_lines: BadLines, generated: list[int]) -> Iterator[tuple[int, Document]]:
    name = display_name(path)
    with open_text(path) as fh:
        lines = _refuse_other_formats(name, skip_undecodable(fh, bad_lines, header=False), text_column)
        for line, record in iter_jsonl(path, lines, bad_lines):
            doc = _document(record, text_column, id_column)
            if isinstance(doc, str):
                bad_lines.skip(name, line, doc)
                continue
            if _given_id(record, id_column)[1] is None:
                generated.append(line)
            yield line, doc


def _refuse_other_formats(name: str, lines: Iterator[str], text_column: str) -> Iterator[str]:
    """``lines`` unchanged, unless the first non-blank one shows the file is not JSONL: a JSON
    array (one line or pretty-printed), or a TSV/CSV header naming the text column (a table
    saved as .jsonl). Then no line of the file is a document, and the whole file is refused
    with the fix."""
    checked = False
    for number, line in enumerate(lines, start=1):
        if not checked and line.strip():
            checked = True
            if line.lstrip().startswith("["):
                raise InputError(name, number, "this is a JSON array, not JSONL (one JSON object per line); "
                                 f"convert it first, e.g. jq -c '.[]' {name} > documents.jsonl")
            separator = "\t" if "\t" in line else ","
            if not line.lstrip().startswith("{") and text_column in (c.strip() for c in line.split(separator)):
                kind = "TSV" if separator == "\t" else "CSV"
                raise InputError(name, number, f"this is a {kind} header ({line.strip()[:60]!r}), not JSONL; "
                                 "read the file as a table with --format table")
        yield line


def require_documents(documents: Iterator[tuple[int, Document]], path: str | Path,
                      bad_lines: BadLines) -> Iterator[tuple[int, Document]]:
    """``documents``, after checking that at least one line of ``path`` was a document: a
    file where no line is usable (CSV in a .jsonl file, an empty file) raises ``InputError``
    with the first skipped line's problem before anything is created from it (the first
    document is read now, the rest as the result is consumed)."""
    documents = iter(documents)
    first = next(documents, None)
    if first is None:
        skipped = bad_lines.skipped
        shown = f"; line {skipped[0].line}: {skipped[0].reason}" if skipped else ""
        count = f"all {len(skipped)} lines were skipped" if skipped else "it holds no lines"
        raise InputError(display_name(path), None, f"no document could be read ({count}{shown}); nothing was written")
    return itertools.chain([first], documents)


def _table(path, text_column, id_column, bad_lines: BadLines, generated: list[int]) -> Iterator[tuple[int, Document]]:
    name = display_name(path)
    with open_text(path) as fh:
        header: list[str] | None = None
        for line, row in iter_rows(path, skip_undecodable(fh, bad_lines, header=True)):
            if header is None:
                header = [c.strip() for c in row]
                if text_column not in header:
                    raise InputError(name, line, f"the header has no column {text_column!r} (found: "
                                     f"{', '.join(header)}); name the text column with --text-column")
                continue
            if len(row) != len(header):
                bad_lines.skip(name, line, f"found {len(row)} columns, the header has {len(header)}")
                continue
            record = dict(zip(header, row))
            doc = _document(record, text_column, id_column)
            if isinstance(doc, str):
                bad_lines.skip(name, line, doc)
                continue
            if _given_id(record, id_column)[1] is None:
                generated.append(line)
            yield line, doc


def _pairs(path, bad_lines: BadLines, generated: list[int]) -> Iterator[tuple[int, Document]]:
    from hybrid_qpr.data.pairs import iter_pairs

    seen: set[str] = set()
    for pair in iter_pairs(path, bad_lines):  # its qids are checked there, for dataset build too
        for qid, text in ((pair.qid1, pair.question1), (pair.qid2, pair.question2)):
            doc_id = qid if qid else text_id(text)
            if doc_id not in seen:
                seen.add(doc_id)
                if not qid:
                    generated.append(pair.line)
                yield pair.line, Document(doc_id, text, {})


@dataclass(frozen=True)
class BatchQuery:
    """One line of a queries file: its line number, id, text and its own filter (or ``None``)."""

    line: int
    id: str
    text: str
    filter: dict[str, Any] | None = None


def iter_batch_queries(path: str | Path, bad_lines: BadLines | None = None) -> Iterator[BatchQuery]:
    """Yield the queries of a queries file ('-' = stdin): plain text, one query per line
    (id = line number), or JSONL with ``id`` (or BEIR ``_id``), ``text`` and optionally
    ``"filter": {"field": value or [values]}`` (checked by ``hybrid_qpr.filters``). A bad
    line (not UTF-8, not JSON, no text, a bad filter) goes to ``bad_lines`` (``None``: strict,
    it raises ``InputError`` naming the file and line)."""
    from hybrid_qpr.filters import filter_problem

    bad_lines = bad_lines or BadLines()
    name = display_name(path)
    with open_text(path) as fh:
        for line, raw in enumerate(skip_undecodable(fh, bad_lines, header=False), start=1):
            raw = raw.strip()
            if not raw:
                continue
            if not raw.startswith("{"):
                yield BatchQuery(line, str(line), raw)
                continue
            try:
                record = read_json_line(raw)
            except ValueError as exc:
                bad_lines.skip(name, line, str(exc))
                continue
            if not isinstance(record, dict):
                bad_lines.skip(name, line, "expected a JSON object")
                continue
            own_filter = record.pop("filter", None)
            problem = filter_problem(own_filter) if own_filter is not None else None
            doc = _document(record, "text", "id", text_option=None)
            if problem or isinstance(doc, str):
                bad_lines.skip(name, line, problem or doc)
                continue
            qid = doc.id if ("id" in record or "_id" in record) else str(line)
            yield BatchQuery(line, qid, doc.text, own_filter)
