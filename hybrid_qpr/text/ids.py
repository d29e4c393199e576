"""The one rule that turns a question's text into a document id, for records that carry
none: ``hybrid-qpr ingest`` (JSONL/table rows without an id, pairs files without qids) and
``hybrid-qpr dataset build`` (paraphrase clusters keyed by text, QA logs) both use it, so a pairs file
ingested without qids gets exactly the ids of the BEIR qrels built from the same file.

Two texts that differ only in case, spacing or punctuation other than ``?`` are one question
(they have the same :func:`normalize_text`), so they get one id.

An id a record does carry is kept exactly as given; one with leading or trailing whitespace
is refused (:func:`padded_id_problem`): stripping it would silently make ``" 12"`` replace
the document ``"12"``, and keeping it would make ``"12"`` never find it.
"""

from __future__ import annotations

import hashlib

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


def padded_id_problem(doc_id: str) -> str:
    """The skip reason of an id with leading or trailing whitespace."""
    return (f"id {doc_id!r} has leading or trailing whitespace; ids are kept exactly as given, so remove the "
            "whitespace in the source (it would otherwise be a different id from the one without it)")
