"""Reader of SQuAD 1.1 JSON for sentence-level answer retrieval (ReQA, Ahmad et al. 2019).

Every paragraph (``context``) is split into sentences by ``hybrid_qpr.text.sentences``; the
gold sentences of a question are those overlapping one of its answer spans, found by
character offsets (``answer_start``, ``len(text)``). SQuAD's dev questions carry several
annotated answers; the gold set is the union over them (usually one sentence).

An answer whose offset does not point at its text is a bad record: it raises ``InputError``
naming the file and the JSON location (``data[3].paragraphs[2].qas[5]``), or with
``BadLines("skip")`` that answer is skipped and listed. (JSON has no useful line per
record: the location starts the problem; a syntax error names its line.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_qpr.artifacts import display_name, open_text
from hybrid_qpr.errors import BadLines, InputError
from hybrid_qpr.text.ids import id_problem
from hybrid_qpr.text.sentences import sentences_overlapping, split_sentences


@dataclass
class SquadQuestion:
    qid: str
    text: str
    gold: list[int]  # indices into the paragraph's sentences
    where: str  # JSON location, for messages


@dataclass
class SquadParagraph:
    context: str
    sentences: list[tuple[int, int]]  # character spans into ``context``
    questions: list[SquadQuestion] = field(default_factory=list)

    def sentence_texts(self) -> list[str]:
        return [self.context[s:e] for s, e in self.sentences]


@dataclass
class SquadArticle:
    title: str
    paragraphs: list[SquadParagraph] = field(default_factory=list)


def read_squad(path: str | Path, bad_lines: BadLines | None = None) -> list[SquadArticle]:
    """Articles of a SQuAD 1.1 file with paragraphs split into sentences and gold sentences found.

    A bad answer or question goes to ``bad_lines`` (strict by default) with its JSON location
    starting the problem. A question left with no usable answer is skipped too.
    """
    bad_lines = bad_lines or BadLines()
    name = display_name(path)
    with open_text(path) as fh:
        raw = "".join(fh)
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(name, exc.lineno, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise InputError(name, None, 'expected a SQuAD JSON object {"data": [{"title", "paragraphs": [...]}], ...}')

    def bad(where: str, problem: str) -> None:
        bad_lines.skip(name, None, f"{where}: {problem}")

    articles: list[SquadArticle] = []
    seen_ids: set[str] = set()
    for a, article in enumerate(data):
        where_a = f"data[{a}]"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise InputError(name, None, f"{where_a}: expected an object with 'title' and a 'paragraphs' list")
        title = str(article.get("title") or f"article-{a}")
        out = SquadArticle(title)
        for p, paragraph in enumerate(article["paragraphs"]):
            where_p = f"{where_a}.paragraphs[{p}]"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not isinstance(paragraph.get("qas", []), list):
                raise InputError(name, None, f"{where_p}: expected an object with a 'context' string and a 'qas' list")
            para = SquadParagraph(context, split_sentences(context))
            for q, qa in enumerate(paragraph.get("qas", [])):
                where_q = f"{where_p}.qas[{q}]"
                parsed = _question(qa, context, para.sentences, where_q, bad)
                if parsed is None:
                    continue
                if parsed.qid in seen_ids:
                    bad(where_q, f"question id {parsed.qid!r} occurs twice")
                    continue
                seen_ids.add(parsed.qid)
                para.questions.append(parsed)
            out.paragraphs.append(para)
        articles.append(out)
    return articles


def _question(qa, context: str, spans: list[tuple[int, int]], where: str, bad) -> SquadQuestion | None:
    if not isinstance(qa, dict) or not isinstance(qa.get("question"), str) or not qa["question"].strip():
        bad(where, "expected an object with a non-empty 'question' string")
        return None
    qid = qa.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
        bad(where, "the question has no 'id'")
        return None
    qid = str(qid).strip()
    problem = id_problem(qid)  # it becomes a query id of the qrels and runs
    if problem:
        bad(where, problem)
        return None
    gold: list[int] = []
    for n, answer in enumerate(qa.get("answers") or []):
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        text = answer.get("text") if isinstance(answer, dict) else None
        if not isinstance(start, int) or isinstance(start, bool) or not isinstance(text, str) or not text:
            bad(f"{where}.answers[{n}]", "expected {'answer_start': int, 'text': non-empty str}")
            continue
        if context[start:start + len(text)] != text:
            bad(f"{where}.answers[{n}]", f"answer_start {start} does not point at the answer text {text[:40]!r} "
                f"(the context there reads {context[start:start + len(text)][:40]!r})")
            continue
        for index in sentences_overlapping(spans, start, start + len(text)):
            if index not in gold:
                gold.append(index)
    if not gold:
        bad(where, "the question has no usable answer span")
        return None
    return SquadQuestion(qid, qa["question"].strip(), sorted(gold), where)
