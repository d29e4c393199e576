"""Reader of answer-selection files (WikiQA, TrecQA): questions with labelled candidate sentences.

Layout (TSV or CSV, ``.gz`` or not, ``-`` for stdin): one row per (question, candidate)::

    qid <TAB> question <TAB> sentence <TAB> label        label 1 = the sentence answers the question

A header row is recognised when it names the columns (``qid``/``questionid``/``question_id``,
``question``, ``sentence``/``answer``/``candidate``, ``label``), and then the columns may come in
any order and others are ignored (so WikiQA's original 7-column release reads too). Without a
header the file must have exactly the four columns above.

Rows are grouped by ``qid`` in order of first appearance (the rows of one question need not be
adjacent). The same qid with two different question texts is an error: it would merge two
questions' candidates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_qpr.artifacts import display_name, iter_rows, open_text
from hybrid_qpr.errors import BadLines, InputError
from hybrid_qpr.text.ids import id_problem

COLUMNS = ("qid", "question", "sentence", "label")
_ALIASES = {
    "qid": ("qid", "questionid", "question_id", "question-id"),
    "question": ("question", "query"),
    "sentence": ("sentence", "answer", "candidate"),
    "label": ("label", "is_answer", "relevance"),
}
_LABELS = {"1": 1, "0": 0, "1.0": 1, "0.0": 0, "true": 1, "false": 0}


@dataclass
class Candidate:
    text: str
    label: int  # 1 = answers the question
    line: int


@dataclass
class AnswerQuestion:
    """One question and its candidate sentences, in file order."""

    qid: str
    text: str
    line: int  # first line of the question
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def positives(self) -> list[str]:
        return [c.text for c in self.candidates if c.label > 0]

    @property
    def negatives(self) -> list[str]:
        return [c.text for c in self.candidates if c.label <= 0]


def _layout(row: list[str]) -> dict[str, int] | None:
    lowered = [c.strip().lower() for c in row]
    found = {key: next((i for i, c in enumerate(lowered) if c in aliases), None) for key, aliases in _ALIASES.items()}
    if any(v is None for v in found.values()):
        return None
    return found  # type: ignore[return-value]


def read_answer_questions(path: str | Path, bad_lines: BadLines | None = None) -> list[AnswerQuestion]:
    """The questions of an answer-selection file, each with its candidates (module docstring).

    A malformed row (wrong column count, empty field, label not 0/1, a qid with a control
    character or already used for another question) goes to ``bad_lines``: strict (the default) raises
    ``InputError(path, line, problem)``, ``BadLines("skip")`` skips and records it.
    """
    bad_lines = bad_lines or BadLines()
    name = display_name(path)
    questions: dict[str, AnswerQuestion] = {}
    for line, parsed in _rows(path, name):
        if isinstance(parsed, str):
            bad_lines.skip(name, line, parsed)
            continue
        qid, question, sentence, label = parsed
        entry = questions.get(qid)
        if entry is None:
            entry = questions[qid] = AnswerQuestion(qid, question, line)
        elif entry.text != question:
            bad_lines.skip(name, line, f"qid {qid!r} has the question {question[:60]!r} here but {entry.text[:60]!r} "
                                       f"on line {entry.line}; a qid must name one question")
            continue
        entry.candidates.append(Candidate(sentence, label, line))
    return list(questions.values())


def _rows(path: str | Path, name: str) -> Iterator[tuple[int, tuple[str, str, str, int] | str]]:
    with open_text(path) as fh:
        columns: dict[str, int] | None = None
        width = len(COLUMNS)
        for line, row in iter_rows(path, fh):
            if columns is None:
                columns = _layout(row)
                if columns is not None:
                    width = len(row)
                    continue
                if len(row) != len(COLUMNS):
                    raise InputError(name, line, f"found {len(row)} columns and no header; expected "
                                     f"{len(COLUMNS)} ({', '.join(COLUMNS)}) or a header naming them")
                columns = {key: i for i, key in enumerate(COLUMNS)}
            if len(row) != width:
                yield line, f"found {len(row)} columns, expected {width}" + (
                    "; a field may contain a tab" if len(row) > width else "")
                continue
            qid, question, sentence = (row[columns[k]].strip() for k in ("qid", "question", "sentence"))
            raw_label = row[columns["label"]].strip().lower()
            if not qid:
                yield line, "the qid is empty"
            elif problem := id_problem(qid):  # it becomes a query id of the qrels and runs
                yield line, f"qid: {problem}"
            elif not question:
                yield line, "the question is empty"
            elif not sentence:
                yield line, "the sentence is empty"
            elif raw_label not in _LABELS:
                yield line, f"label must be 0 or 1, found {row[columns['label']]!r}"
            else:
                yield line, (qid, question, sentence, _LABELS[raw_label])
