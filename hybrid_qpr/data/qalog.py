"""Reader of QA logs (question, answer id): the raw input of distant supervision.

Formats (``.gz`` or not, ``-`` for stdin):

* **JSONL**: one object per line with the question and answer-id fields
  (``.jsonl``/``.json`` extension, or a first line starting with ``{``).
* **TSV/CSV** with a header naming the two columns (any order, other columns ignored),
  or without a header and exactly two columns ``question, answer_id``.

Default column names are ``question`` and ``answer_id``; when they are not given
explicitly, ``query``/``text``/``utterance`` and ``answer``/``aid`` are accepted too.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from hybrid_qpr.artifacts import base_suffix, display_name, iter_jsonl, iter_rows, open_text
from hybrid_qpr.data.clusters import QALogRecord
from hybrid_qpr.errors import BadLines, InputError

_QUESTION_ALIASES = ("question", "query", "text", "utterance")
_ANSWER_ALIASES = ("answer_id", "answer", "aid")


def iter_qa_log(
    path: str | Path,
    *,
    question_column: str | None = None,
    answer_column: str | None = None,
    bad_lines: BadLines | None = None,
) -> Iterator[QALogRecord]:
    """Yield ``QALogRecord(line, question, answer_id)`` for each row of a QA log.

    An empty question or answer id, a missing field, a wrong column count or a line that is
    not a JSON object goes to ``bad_lines``: strict (the default) raises
    ``InputError(path, line, problem)``, ``BadLines("skip")`` skips and records it.
    """
    bad_lines = bad_lines or BadLines()
    q_names = (question_column,) if question_column else _QUESTION_ALIASES
    a_names = (answer_column,) if answer_column else _ANSWER_ALIASES
    name = display_name(path)
    with open_text(path) as fh:
        first = fh.readline()
        lines = itertools.chain([first], fh)
        if base_suffix(path) in (".jsonl", ".json") or first.lstrip().startswith("{"):
            raw = ((line, _from_object(obj, q_names, a_names)) for line, obj in iter_jsonl(path, lines, bad_lines))
        else:
            raw = _from_rows(name, iter_rows(path, lines), q_names, a_names)
        for line, parsed in raw:
            if isinstance(parsed, str):
                bad_lines.skip(name, line, parsed)
                continue
            yield QALogRecord(line, *parsed)


def _check(question: object, answer: object) -> tuple[str, str] | str:
    """(question, answer id), or the problem with them."""
    if not isinstance(question, str) or not question.strip():
        return f"the question is empty or not a string ({question!r})"
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        return f"the answer id is empty or not a string/number ({answer!r})"
    return question.strip(), answer.strip()


def _from_object(obj: dict, q_names: tuple[str, ...], a_names: tuple[str, ...]) -> tuple[str, str] | str:
    q_key = next((k for k in q_names if k in obj), None)
    a_key = next((k for k in a_names if k in obj), None)
    if q_key is None or a_key is None:
        missing = "question" if q_key is None else "answer id"
        names = q_names if q_key is None else a_names
        return f"no {missing} field (looked for {', '.join(names)}); found fields {sorted(obj)}"
    return _check(obj[q_key], obj[a_key])


def _from_rows(name: str, rows: Iterator[tuple[int, list[str]]], q_names: tuple[str, ...],
               a_names: tuple[str, ...]) -> Iterator[tuple[int, tuple[str, str] | str]]:
    q_col = a_col = -1
    width = 2
    for line, row in rows:
        if q_col < 0:
            lowered = [c.strip().lower() for c in row]
            q_col = next((i for i, c in enumerate(lowered) if c in q_names), -1)
            a_col = next((i for i, c in enumerate(lowered) if c in a_names), -1)
            if q_col >= 0 and a_col >= 0:
                width = len(row)
                continue
            if len(row) != 2:
                raise InputError(name, line, f"found {len(row)} columns and no header naming the question and answer "
                                 f"columns (looked for {', '.join(q_names)} / {', '.join(a_names)}); without a header "
                                 "the file must have exactly 2 columns: question, answer_id")
            q_col, a_col = 0, 1
        if len(row) != width:
            yield line, f"found {len(row)} columns, expected {width}"
            continue
        yield line, _check(row[q_col], row[a_col])
