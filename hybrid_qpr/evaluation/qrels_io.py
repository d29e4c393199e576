"""Judgments, runs and query logs in the formats other tools read and write.

Judgments (qrels: query id -> document id -> grade):

* ``trec``: TREC qrels, ``query-id 0 doc-id grade`` per line, whitespace-separated (trec_eval's
  input).
* ``quepid``: Quepid's ratings CSV, header ``query,docid,rating``, keyed by the query's *text*;
  the texts are mapped to ids through a BEIR ``queries.jsonl`` (``queries=``), and a text
  without an id gets a stable one derived from it (``hybrid_qpr.data.beir.query_id``).
* ``beir``: a BEIR directory: ``qrels/<split>.tsv`` (header ``query-id corpus-id score``), with
  the texts in ``queries.jsonl``.

Runs (query id -> ranked document ids) are read and written in TREC run format:
``query-id Q0 doc-id rank score tag``. Read, each query's lines are ranked by score, highest
first, equal scores by document id in reverse order, as trec_eval ranks them.

Whitespace formats cannot hold an id with a space or tab (nor BEIR's TSV a tab): such an id is
refused with one line, never written torn. Every bad line is an ``InputError`` naming the file
and line; every file is written atomically.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, get_args

from hybrid_qpr.artifacts import atomic_write, iter_jsonl, iter_rows, open_text, write_jsonl
from hybrid_qpr.data.beir import QRELS_HEADER, load_qrels
from hybrid_qpr.errors import ConfigError, InputError

QrelsFormat = Literal["trec", "quepid", "beir"]
QRELS_FORMATS: tuple[str, ...] = get_args(QrelsFormat)
QUEPID_HEADER = ("query", "docid", "rating")
Qrels = dict[str, dict[str, int]]


def guess_format(path: str | Path) -> str:
    """``beir`` for a directory (or a path without a suffix), ``quepid`` for ``.csv``, else ``trec``."""
    path = Path(path)
    if path.is_dir() or (not path.exists() and not path.suffix):
        return "beir"
    return "quepid" if path.suffix.lower() == ".csv" else "trec"


def check_format(fmt: str) -> str:
    if fmt not in QRELS_FORMATS:
        raise ConfigError(f"format {fmt!r}: allowed judgment formats are {', '.join(QRELS_FORMATS)}")
    return fmt


def _check_id(value: str, what: str, where: str, *, forbid: str = "whitespace") -> None:
    """Refuse an id the target format cannot hold (``forbid``: ``whitespace`` or ``tab``)."""
    if not value:
        raise ConfigError(f"{where}: an empty {what} cannot be written")
    bad = any(c.isspace() for c in value) if forbid == "whitespace" else ("\t" in value or "\n" in value or "\r" in value)
    if bad:
        kind = "spaces, tabs or line breaks" if forbid == "whitespace" else "tabs or line breaks"
        raise ConfigError(f"{where}: {what} {value!r} contains {kind}, which this format cannot hold; "
                          f"use the BEIR or Quepid format, or ids without them")


def _grade(path: Path, line: int, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InputError(path, line, f"the grade must be an integer, found {value!r}") from None


def _add(qrels: Qrels, seen: dict[tuple[str, str], int], path: Path, line: int, query: str, doc: str, grade: int) -> None:
    if (query, doc) in seen:
        raise InputError(path, line, f"query {query!r} and document {doc!r} are judged twice (first on line {seen[query, doc]})")
    seen[query, doc] = line
    qrels.setdefault(query, {})[doc] = grade


# ---------------------------------------------------------------- TREC qrels
def read_trec_qrels(path: str | Path) -> Qrels:
    """``query-id iteration doc-id grade`` per line (the iteration column is ignored)."""
    path = Path(path)
    qrels: Qrels = {}
    seen: dict[tuple[str, str], int] = {}
    for line, fields in _whitespace_rows(path, "query-id 0 doc-id grade", "TREC qrels"):
        _add(qrels, seen, path, line, fields[0], fields[2], _grade(path, line, fields[3]))
    return qrels


def _whitespace_rows(path: Path, layout: str, kind: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of each non-blank line of a whitespace-separated file whose
    lines must have the fields of ``layout``."""
    expected = len(layout.split())
    with open_text(path) as fh:
        for line, text in enumerate(fh, start=1):
            fields = text.split()
            if not fields:
                continue
            if len(fields) != expected:
                raise InputError(path, line, f"found {len(fields)} fields, expected {expected} ({layout}); "
                                 f"an id with a space cannot be in {kind}")
            yield line, fields


def write_trec_qrels(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> int:
    """Write ``qrels`` sorted by query and document id; returns the number of lines."""
    rows = _sorted_rows(qrels)
    for query, doc, _ in rows:
        _check_id(query, "query id", str(path))
        _check_id(doc, "document id", str(path))
    with atomic_write(path) as fh:
        fh.writelines(f"{query} 0 {doc} {grade}\n" for query, doc, grade in rows)
    return len(rows)


def _sorted_rows(qrels: Mapping[str, Mapping[str, int]]) -> list[tuple[str, str, int]]:
    return [(q, d, int(g)) for q in sorted(qrels) for d, g in sorted(qrels[q].items())]


# ---------------------------------------------------------------- Quepid CSV
def read_quepid(path: str | Path, queries: Mapping[str, str] | None = None) -> tuple[Qrels, dict[str, str]]:
    """``(qrels, query id -> text)`` of a Quepid ratings CSV. ``queries`` (id -> text) gives the
    ids of known texts; other texts get ids derived from the text."""
    from hybrid_qpr.data.beir import normalize_query, query_id

    path = Path(path)
    by_text = {normalize_query(text): qid for qid, text in (queries or {}).items()}
    qrels: Qrels = {}
    texts: dict[str, str] = {}
    seen: dict[tuple[str, str], int] = {}
    with open_text(path) as fh:
        for line, row in iter_rows(path, fh):
            if line == 1:
                if [c.strip().lower() for c in row] != list(QUEPID_HEADER):
                    raise InputError(path, 1, f"expected the header {','.join(QUEPID_HEADER)}, found {','.join(row)!r}")
                continue
            if len(row) != 3:
                raise InputError(path, line, f"found {len(row)} columns, expected 3 ({','.join(QUEPID_HEADER)})")
            text, doc = normalize_query(row[0]), row[1].strip()
            if not text or not doc:
                raise InputError(path, line, "the query and the docid must not be empty")
            qid = by_text.get(text) or query_id(text)
            texts[qid] = text
            _add(qrels, seen, path, line, qid, doc, _grade(path, line, row[2].strip()))
    return qrels, texts


def write_quepid(path: str | Path, qrels: Mapping[str, Mapping[str, int]], queries: Mapping[str, str]) -> int:
    """Write ``qrels`` as a Quepid ratings CSV; every judged query needs its text in ``queries``."""
    import csv

    missing = sorted(q for q in qrels if q not in queries)
    if missing:
        raise ConfigError(f"{path}: Quepid keys ratings by query text, and {len(missing)} judged queries have none "
                          f"(e.g. {missing[0]!r}); give the queries.jsonl that holds their texts")
    rows = _sorted_rows(qrels)
    with atomic_write(path) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(QUEPID_HEADER)
        writer.writerows((queries[q], d, g) for q, d, g in rows)
    return len(rows)


# ---------------------------------------------------------------- BEIR
def read_beir_queries(beir_dir: str | Path) -> dict[str, str]:
    """Query id -> text of ``beir_dir/queries.jsonl`` (empty when the file is absent)."""
    path = Path(beir_dir) / "queries.jsonl"
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for line, obj in iter_jsonl(path):
        ident, text = obj.get("_id"), obj.get("text")
        if not isinstance(ident, (str, int)) or isinstance(ident, bool) or not isinstance(text, str):
            raise InputError(path, line, 'expected {"_id": str, "text": str}')
        out[str(ident)] = text
    return out


def read_beir_qrels(beir_dir: str | Path, split: str) -> Qrels:
    path = Path(beir_dir) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise InputError(path, None, f"missing; a BEIR directory keeps the {split!r} judgments in qrels/{split}.tsv")
    return load_qrels(path)


def write_beir_qrels(beir_dir: str | Path, split: str, qrels: Mapping[str, Mapping[str, int]],
                     queries: Mapping[str, str] | None = None) -> int:
    """Write ``qrels/<split>.tsv``; with ``queries``, add their texts to ``queries.jsonl`` (the
    queries already there are kept, a text given here replaces the old one)."""
    beir_dir = Path(beir_dir)
    rows = _sorted_rows(qrels)
    for query, doc, _ in rows:
        _check_id(query, "query id", str(beir_dir), forbid="tab")
        _check_id(doc, "document id", str(beir_dir), forbid="tab")
    if queries:
        merged = {**read_beir_queries(beir_dir), **queries}
        write_jsonl(beir_dir / "queries.jsonl", ({"_id": q, "text": t} for q, t in sorted(merged.items())))
    with atomic_write(beir_dir / "qrels" / f"{split}.tsv") as fh:
        fh.write("\t".join(QRELS_HEADER) + "\n")
        fh.writelines(f"{q}\t{d}\t{g}\n" for q, d, g in rows)
    return len(rows)


# ---------------------------------------------------------------- any format
def read_judgments(path: str | Path, fmt: str | None = None, *, split: str = "test",
                   queries: Mapping[str, str] | None = None) -> tuple[Qrels, dict[str, str]]:
    """``(qrels, query texts known)`` from a file or BEIR directory in ``fmt`` (guessed when None)."""
    fmt = check_format(fmt or guess_format(path))
    if fmt == "trec":
        return read_trec_qrels(path), dict(queries or {})
    if fmt == "quepid":
        qrels, texts = read_quepid(path, queries)
        return qrels, {**(queries or {}), **texts}
    return read_beir_qrels(path, split), {**read_beir_queries(path), **(queries or {})}


def write_judgments(path: str | Path, qrels: Mapping[str, Mapping[str, int]], fmt: str | None = None, *,
                    split: str = "test", queries: Mapping[str, str] | None = None) -> int:
    """Write ``qrels`` to ``path`` in ``fmt`` (guessed when None); returns the number of judgments."""
    fmt = check_format(fmt or guess_format(path))
    if fmt == "trec":
        return write_trec_qrels(path, qrels)
    if fmt == "quepid":
        return write_quepid(path, qrels, queries or {})
    return write_beir_qrels(path, split, qrels, {q: t for q, t in (queries or {}).items() if q in qrels})


# ---------------------------------------------------------------- TREC runs
def read_trec_run(path: str | Path) -> dict[str, list[str]]:
    """Query id -> document ids, best first (see the module docstring for the order)."""
    path = Path(path)
    scored: dict[str, list[tuple[float, str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for line, fields in _whitespace_rows(path, "query-id Q0 doc-id rank score tag", "a TREC run"):
        query, doc = fields[0], fields[2]
        try:
            score = float(fields[4])
        except ValueError:
            raise InputError(path, line, f"the score must be a number, found {fields[4]!r}") from None
        if (query, doc) in seen:
            raise InputError(path, line, f"document {doc!r} is listed twice for query {query!r} "
                             f"(first on line {seen[query, doc]})")
        seen[query, doc] = line
        scored.setdefault(query, []).append((score, doc))
    if not scored:
        raise InputError(path, None, "holds no run lines (query-id Q0 doc-id rank score tag)")
    return {q: [doc for _, doc in sorted(hits, reverse=True)] for q, hits in scored.items()}


def write_trec_run(path: str | Path, run: Mapping[str, Sequence[str]], tag: str = "hybrid-qpr") -> int:
    """Write ``run`` with rank 1.. and score ``depth - rank + 1`` (strictly decreasing, so any
    reader ranks the documents exactly as listed); returns the number of lines."""
    _check_id(tag, "run tag", str(path))
    lines: list[str] = []
    for query in sorted(run):
        _check_id(query, "query id", str(path))
        ranked = list(run[query])
        for rank, doc in enumerate(ranked, start=1):
            _check_id(doc, "document id", str(path))
            lines.append(f"{query} Q0 {doc} {rank} {len(ranked) - rank + 1} {tag}\n")
    with atomic_write(path) as fh:
        fh.writelines(lines)
    return len(lines)


# ---------------------------------------------------------------- query logs
def read_query_log(path: str | Path) -> dict[str, str]:
    """Query id -> text of a query log: plain text, one query per line (ids ``q1``, ``q2``... by
    line), or JSONL (``.jsonl`` / ``.json``) with ``"text"`` or ``"query"`` and an optional ``"id"``
    or ``"_id"``. Repeated texts are kept once (the first id)."""
    path = Path(path)
    pairs: list[tuple[int, str, str]] = []
    if path.suffix.lower() in (".jsonl", ".json"):
        for line, obj in iter_jsonl(path):
            text = obj.get("text", obj.get("query"))
            ident = obj.get("id", obj.get("_id", f"q{line}"))
            if not isinstance(text, str) or not text.strip() or not isinstance(ident, (str, int)) or isinstance(ident, bool):
                raise InputError(path, line, 'expected {"text": "..."} (or "query"), with an optional string "id"')
            pairs.append((line, str(ident), text.strip()))
    else:
        with open_text(path) as fh:
            pairs = [(line, f"q{line}", text.strip()) for line, text in enumerate(fh, start=1) if text.strip()]
    out: dict[str, str] = {}
    texts: set[str] = set()
    for line, ident, text in pairs:
        if ident in out:
            raise InputError(path, line, f"the id {ident!r} is used twice")
        if text not in texts:
            texts.add(text)
            out[ident] = text
    if not out:
        raise InputError(path, None, "holds no queries (one per line, or JSONL with a \"text\" field)")
    return out
