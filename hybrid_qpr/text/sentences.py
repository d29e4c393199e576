"""Sentence splitting of paragraphs into character spans (for sentence-level answer retrieval).

ReQA (Ahmad et al. 2019) turns SQuAD into a retrieval task by splitting every paragraph into
sentences; the gold answer of a question is the sentence holding its answer span. Offsets
must survive the split, so ``split_sentences`` returns ``(start, end)`` spans into the
paragraph, never rewritten text.

Rule: a sentence ends after ``.``, ``!`` or ``?`` (possibly repeated, possibly followed by
closing quotes or brackets) when whitespace follows and the next sentence starts with an
upper-case letter, a digit, or an opening quote or bracket. A period does **not** end a
sentence when the word before it is

* a known abbreviation (``Mr.``, ``Dr.``, ``St.``, ``e.g.``, ``Jan.``, ``No.`` ...),
* a single letter, an initial (``J. R. R. Tolkien``), or
* a dotted acronym (``U.S.``, ``a.m.``, ``Ph.D.``).

Decimals (``3.5``), version numbers and URLs never split because no whitespace follows the
period. A newline followed by more text always ends a sentence. The rule is tuned for
English encyclopaedic prose; it is wrong for "... in the U.S. The next ...", which it keeps
as one sentence (abbreviation wins), a deliberate choice: a missed split costs less in
retrieval than a split inside a name.
"""

from __future__ import annotations

import re

# Lower-cased, without the final period: titles, months, Latin and company abbreviations.
# (Weekday abbreviations are left out: "sat", "sun", "wed" end sentences as ordinary words.)
ABBREVIATIONS = frozenset("""
mr mrs ms dr prof rev fr sr jr st mt ft gen col lt sgt capt cmdr adm gov sen rep pres hon messrs mme mlle
jan feb mar apr jun jul aug sep sept oct nov dec
etc vs viz cf ca approx al eg ie inc ltd co corp bros dept univ assn ave blvd hwy mfg esp incl
""".split())
# Abbreviations that are also ordinary words; they hold the sentence only before a number ("No. 5", "Fig. 2").
NUMBER_ABBREVIATIONS = frozenset("no nos vol vols pp fig figs op ch sec art ed eds p".split())

_END = re.compile(r"""[.!?]+["'”’)\]]*(?:\[[^\]\n]{1,40}\])*""")
_NEXT_START = re.compile(r"""["'“‘(\[]*[A-Z0-9À-ÖØ-Þ]""")
_WORD_BEFORE = re.compile(r"""(?<![\w'’-])([A-Za-z.]+)\.$""")


def _is_abbreviation(text: str, period: int, next_start: int) -> bool:
    """Is the ``.`` at ``period`` the end of an abbreviation rather than of a sentence?
    ``next_start`` is where the following text begins."""
    match = _WORD_BEFORE.search(text, 0, period + 1)
    if match is None:
        return False
    word = match.group(1)
    if "." in word:  # dotted acronym: U.S. / e.g. / Ph.D.
        return all(len(part) <= 2 for part in word.split(".") if part)
    if len(word) == 1:  # an initial or a single letter: "J. Smith", "option b."
        return True
    if word.lower() in NUMBER_ABBREVIATIONS:
        return text[next_start:next_start + 1].isdigit()
    return word.lower() in ABBREVIATIONS


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text``, in order, whitespace
    trimmed; ``text[start:end]`` is a sentence. Every non-space character of ``text`` lies in
    exactly one span. An empty or blank text gives no span."""
    spans: list[tuple[int, int]] = []
    start = 0
    n = len(text)
    i = 0
    while i < n:
        ch = text[i]
        if ch == "\n":
            if text[start:i].strip():
                spans.append((start, i))
                start = i + 1
            i += 1
            continue
        if ch in ".!?":
            match = _END.match(text, i)
            end = match.end() if match else i + 1
            ws = end
            while ws < n and text[ws] in " \t\r\n\u00a0":
                ws += 1
            if ws > end and ws < n and _NEXT_START.match(text, ws):
                last_period = text.rfind(".", i, end)
                only_period = text[i] == "." and not any(c in "!?" for c in text[i:end])
                if not (only_period and _is_abbreviation(text, last_period, ws)):
                    spans.append((start, end))
                    start = ws
                    i = ws
                    continue
            i = end
            continue
        i += 1
    if text[start:].strip():
        spans.append((start, n))
    return [_trim(text, s, e) for s, e in spans if text[s:e].strip()]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def sentences_overlapping(spans: list[tuple[int, int]], start: int, end: int) -> list[int]:
    """Indices of the sentence spans that share a character with ``[start, end)``: the gold
    sentence(s) of an answer span. An answer inside one sentence gives one index; an answer
    across a boundary the splitter drew gives every sentence it touches. An empty answer
    span (``start == end``) counts as the sentence holding ``start``."""
    if end <= start:
        end = start + 1
    return [i for i, (s, e) in enumerate(spans) if s < end and start < e]
