"""The one rule that turns a question's text into a document id, for records that carry
none: ``hybrid-qpr ingest`` (JSONL/table rows without an id, pairs files without qids) and
``hybrid-qpr dataset build`` (paraphrase clusters keyed by text, QA logs) both use it, so a pairs file
ingested without qids gets exactly the ids of the BEIR qrels built from the same file.

Two texts that differ only in case, spacing or punctuation other than ``?`` are one question
(they have the same :func:`normalize_text`), so they get one id.

An id a record does carry is kept exactly as given; one with leading or trailing whitespace
is refused (:func:`padded_id_problem`): stripping it would silently make ``" 12"`` replace
the document ``"12"``, and keeping it would make ``"12"`` never find it. One holding a control
character (TAB, CR, LF, any other C0 control or DEL) is refused too (:func:`id_problem`): the
qrels and run files that carry ids are tab- and line-separated, so such an id would tear them.
"""

from __future__ import annotations

import hashlib
import re

from hybrid_qpr.text.tokenizer import tokenize


def normalize_text(text: str) -> str:
    """The key two questions share when they are "the same text": the project tokenizer's
    tokens (lowercased, NFKC, words and ``?``) joined by one space, so case, spacing and
    punctuation other than ``?`` do not matter. Falls back to the stripped lowercase text
    when it has no tokens at all."""
    tokens = tokenize(text)
    return " ".join(tokens) if tokens else text.strip().lower()


def text_id(text: str) -> str:
    """Stable id for a question without one: ``t`` + 16 hex digits of sha256 of its
    :func:`normalize_text` (UTF-8)."""
    return "t" + hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()[:16]


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def id_problem(doc_id: str) -> str | None:
    """Why ``doc_id``, as a record gives it, cannot be a document id (``None`` when it can):
    surrounding whitespace or a control character."""
    if doc_id != doc_id.strip():
        return padded_id_problem(doc_id)
    found = _CONTROL.search(doc_id)
    if found:
        return (f"id {doc_id[:80]!r} holds the control character {found.group()!r} at position {found.start()}; "
                "ids may not contain tabs, line breaks or other control characters (they separate the fields "
                "and lines of qrels and run files)")
    return None


def padded_id_problem(doc_id: str) -> str:
    """The skip reason of an id with leading or trailing whitespace."""
    return (f"id {doc_id!r} has leading or trailing whitespace; ids are kept exactly as given, so remove the "
            "whitespace in the source (it would otherwise be a different id from the one without it)")
