"""Reader of question-pair files: the only parser of raw pair data in hybrid-qpr.

Layouts understood (``.gz`` or not, ``-`` for stdin):

* **Quora**: ``id, qid1, qid2, question1, question2, is_duplicate`` as TSV or CSV
  (Quora's own CSV quotes fields and may put newlines or commas inside them).
* **Two-column paraphrase TSV/CSV**: ``question1 <TAB> question2``; every row is a
  duplicate pair and has no qids.

A header is recognised when its first row names both question columns (``question1`` /
``question2``, or ``q1``/``q2``, ``text1``/``text2``, ``sentence1``/``sentence2``); with a
header, columns are found by name and may come in any order, and ``id``, ``qid1``,
``qid2``, ``is_duplicate`` are optional (no ``is_duplicate`` column means every row is a
duplicate). Without a header, 6 columns mean the Quora layout and 2 columns the
paraphrase layout. Rows with ``is_duplicate = 0`` are returned too: the caller decides
(clusters use duplicates only).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hybrid_qpr.artifacts import display_name, iter_rows, open_text, skip_undecodable
from hybrid_qpr.errors import BadLines, InputError
from hybrid_qpr.text.ids import id_problem

log = logging.getLogger(__name__)

QUORA_COLUMNS = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
PARAPHRASE_COLUMNS = ("question1", "question2")
_ALIASES = {
    "question1": ("question1", "q1", "text1", "sentence1"),
    "question2": ("question2", "q2", "text2", "sentence2"),
    "qid1": ("qid1",),
    "qid2": ("qid2",),
    "is_duplicate": ("is_duplicate", "label", "is_paraphrase"),
}
_TRUE = {"1": True, "0": False, "1.0": True, "0.0": False, "true": True, "false": False}


@dataclass(frozen=True, slots=True)
class QuestionPair:
    """One row of a pair file. ``line`` is the 1-based line the row starts on."""

    line: int
    qid1: str | None
    qid2: str | None
    question1: str
    question2: str
    is_duplicate: bool


@dataclass(frozen=True)
class _Layout:
    """Column positions of one file; ``None`` for a column the file does not have."""

    width: int
    question1: int
    question2: int
    qid1: int | None
    qid2: int | None
    is_duplicate: int | None
    names: tuple[str, ...]

    @classmethod
    def from_header(cls, row: list[str]) -> "_Layout | None":
        lowered = [c.strip().lower() for c in row]
        found: dict[str, int | None] = {}
        for key, aliases in _ALIASES.items():
            found[key] = next((i for i, c in enumerate(lowered) if c in aliases), None)
        if found["question1"] is None or found["question2"] is None:
            return None
        return cls(len(row), found["question1"], found["question2"], found["qid1"], found["qid2"],  # type: ignore[arg-type]
                   found["is_duplicate"], tuple(lowered))

    @classmethod
    def positional(cls, width: int) -> "_Layout | None":
        if width == len(QUORA_COLUMNS):
            return cls(width, 3, 4, 1, 2, 5, QUORA_COLUMNS)
        if width == len(PARAPHRASE_COLUMNS):
            return cls(width, 0, 1, None, None, None, PARAPHRASE_COLUMNS)
        return None


def iter_pairs(path: str | Path, bad_lines: BadLines | None = None) -> Iterator[QuestionPair]:
    """Yield the question pairs of ``path`` in file order.

    A malformed row (wrong number of columns, empty question, ``is_duplicate`` that is
    not 0/1, only one of the two qids, a qid with a control character) or a line that is not
    UTF-8 goes to ``bad_lines``: strict (the default) raises ``InputError(path, line, problem)``, ``BadLines("skip")``
    skips and records it. The first row must be readable and tell the layout. Surrounding
    whitespace of fields is stripped.
    """
    bad_lines = bad_lines or BadLines()
    name = display_name(path)
    before = len(bad_lines.skipped)
    with open_text(path) as fh:
        layout: _Layout | None = None
        for line, row in iter_rows(path, skip_undecodable(fh, bad_lines, header=True)):
            if layout is None:
                layout = _Layout.from_header(row)
                if layout is not None:
                    continue
                layout = _Layout.positional(len(row))
                if layout is None:
                    raise InputError(name, line, f"found {len(row)} columns; expected 6 (Quora layout: "
                                     f"{', '.join(QUORA_COLUMNS)}) or 2 (question1, question2), or a header "
                                     "row naming question1 and question2")
            pair = _parse_row(row, layout, line)
            if isinstance(pair, str):
                bad_lines.skip(name, line, pair)
                continue
            yield pair
    if len(bad_lines.skipped) > before:
        log.warning("%s: skipped %d malformed line(s)", name, len(bad_lines.skipped) - before)


def _parse_row(row: list[str], layout: _Layout, line: int) -> QuestionPair | str:
    """The pair on ``row``, or the problem with it."""
    if len(row) != layout.width:
        return (f"found {len(row)} columns, expected {layout.width} ({', '.join(layout.names)})"
                + ("; a question may contain a tab or an unquoted delimiter" if len(row) > layout.width else ""))
    q1 = row[layout.question1].strip()
    q2 = row[layout.question2].strip()
    if not q1:
        return "question1 is empty"
    if not q2:
        return "question2 is empty"
    qid1 = (row[layout.qid1].strip() or None) if layout.qid1 is not None else None
    qid2 = (row[layout.qid2].strip() or None) if layout.qid2 is not None else None
    if (qid1 is None) != (qid2 is None):
        return f"only one qid is given (qid1={qid1!r}, qid2={qid2!r}); give both or neither"
    problem = next(filter(None, (id_problem(qid) for qid in (qid1, qid2) if qid)), None)
    if problem:
        return problem
    if layout.is_duplicate is None:
        duplicate = True
    else:
        value = _TRUE.get(row[layout.is_duplicate].strip().lower())
        if value is None:
            return f"is_duplicate must be 0 or 1, found {row[layout.is_duplicate]!r}"
        duplicate = value
    return QuestionPair(line, qid1, qid2, q1, q2, duplicate)
