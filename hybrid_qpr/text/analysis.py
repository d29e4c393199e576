"""BM25's language analysis: the one chain every backend indexes and searches with.

A language analyzer turns a text into BM25 terms in five steps:

1. Unicode NFKC normalisation (full-width letters, ligatures, composed accents);
2. words: maximal runs of Unicode word characters (letters, marks, decimal digits,
   connector punctuation and joiners: ``\\w`` as Unicode TR 18 defines it, which keeps a
   Devanagari or Tamil word with its vowel signs in one piece, unlike Python's ``re``);
3. lower case;
4. stop words dropped (English: the classic 33-word list of Lucene's English analyzer; the
   other languages have none: BM25's idf already weighs their function words down);
5. the language's Snowball stemmer (PyStemmer, the C libstemmer behind a small binding:
   stemming a million questions costs seconds, where the pure-Python snowballstemmer
   costs minutes; both run the same Snowball algorithms), and ASCII folding of Latin
   letters (``é`` -> ``e``, ``ø`` -> ``o``, ``ß`` -> ``ss``; other scripts are left as they
   are): after the stemmer, which reads the accents of its language, except for English,
   whose stemmer knows only ASCII letters (folded first, ``école`` and ``ecole`` stem alike).

The embedded index runs it at ingest and query time. OpenSearch and Elasticsearch index the
terms this chain yields, joined by spaces, in a field read by the core ``whitespace``
analyzer (``hybrid_qpr.backends.cluster.bodies``): Lucene has no NFKC filter without the ICU
plugin and an Elasticsearch node without its analysis-common module has no stemmer, so the
chain runs once, here, and all three backends hold the same terms (tested against both
engines' ``_analyze`` and term vectors).

An index records its analyzer (``Analyzer.record``); an index that records none was built
before this module existed and keeps the ``legacy`` analyzer (``hybrid_qpr.text.tokenize``:
NFKC, lower case, words and ``?`` marks).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hybrid_qpr.errors import ConfigError

LEGACY = "legacy"
DEFAULT_LANGUAGE = "english"
VERSION = 1  # of the chain; an index records it, and a chain that changes gets a new one
# Snowball's stemmers (PyStemmer's names) offered as --language; "porter" (the 1980 English
# algorithm, superseded by "english") and "dutch_porter" are left out
LANGUAGES: tuple[str, ...] = (
    "arabic", "armenian", "basque", "catalan", "czech", "danish", "dutch", "english", "esperanto", "estonian",
    "finnish", "french", "german", "greek", "hindi", "hungarian", "indonesian", "irish", "italian", "lithuanian",
    "nepali", "norwegian", "persian", "polish", "portuguese", "romanian", "russian", "serbian", "sesotho",
    "spanish", "swedish", "tamil", "turkish", "yiddish")
ANALYZERS: tuple[str, ...] = (*LANGUAGES, LEGACY)
ENGLISH_STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will",
    "with"))
STOP_WORDS: dict[str, frozenset[str]] = {"english": ENGLISH_STOP_WORDS}
FOLD_BEFORE_STEMMING = frozenset({"english"})  # stemmers that read ASCII letters only
# Lucene's whitespace tokenizer cuts a term at 255 UTF-16 units; a longer "word" (a hash, a
# run of digits) is dropped here so that a cluster's field gives back exactly these terms
MAX_TERM_UNITS = 255
# Latin letters NFKD leaves whole, folded by hand (what ASCII folding gives them elsewhere)
_LATIN_LETTERS = {"ß": "ss", "ẞ": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ð": "d", "ł": "l", "ŀ": "l",
                  "ħ": "h", "ı": "i", "þ": "th", "ŋ": "n", "ŧ": "t", "ƀ": "b", "ɨ": "i", "ʉ": "u", "ĸ": "q"}


def _word_pattern():
    import regex  # a core dependency: Python's re splits words at combining vowel signs

    return regex.compile(r"[\p{Alphabetic}\p{Mark}\p{Decimal_Number}\p{Connector_Punctuation}\p{Join_Control}]+")


_WORDS = None
# ASCII text is NFKC already and its Unicode word characters are these: the common case, on the
# standard library's faster engine
_ASCII_WORDS = re.compile(r"[A-Za-z0-9_]+")


def words(text: str) -> list[str]:
    """The runs of Unicode word characters of ``text`` (step 2), as they are."""
    global _WORDS
    if _WORDS is None:
        _WORDS = _word_pattern()
    return _WORDS.findall(text)


@lru_cache(maxsize=65536)
def _folded_char(char: str) -> str:
    if char in _LATIN_LETTERS:
        return _LATIN_LETTERS[char]
    base = "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))
    # only where the letter is a Latin one: й, ά and ё keep their marks (they are other letters)
    return base if base and base.isascii() and base.isalnum() else char


def ascii_fold(term: str) -> str:
    """``term`` with its accented Latin letters folded to ASCII (step 5)."""
    if term.isascii():
        return term
    return "".join(c if c.isascii() else _folded_char(c) for c in term)


def _too_long(term: str) -> bool:
    return len(term) > MAX_TERM_UNITS // 2 and len(term.encode("utf-16-le")) // 2 > MAX_TERM_UNITS


@dataclass(frozen=True)
class Analyzer:
    """One of ``ANALYZERS``: a Snowball language, or ``legacy`` (see the module docstring)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in ANALYZERS:
            raise ConfigError(f"analyzer {self.name!r}: choose a language among {', '.join(LANGUAGES)} "
                              f"(or {LEGACY!r}, the words-and-question-marks tokenizer of earlier indexes)")

    @property
    def legacy(self) -> bool:
        return self.name == LEGACY

    def analyze(self, text: str) -> list[str]:
        """The BM25 terms of ``text``, in order (repeats kept: they count in BM25)."""
        if self.legacy:
            from hybrid_qpr.text.tokenizer import tokenize

            return tokenize(text)
        stop = STOP_WORDS.get(self.name, frozenset())
        if text.isascii():  # nothing to normalise or fold
            kept = [w for w in _ASCII_WORDS.findall(text.lower()) if w not in stop]
            return [t for t in _stemmer(self.name).stemWords(kept) if t and len(t) <= MAX_TERM_UNITS]
        kept = [w for w in words(unicodedata.normalize("NFKC", text).lower()) if w not in stop]
        if self.name in FOLD_BEFORE_STEMMING:
            terms = _stemmer(self.name).stemWords([ascii_fold(w) for w in kept])
        else:
            terms = [ascii_fold(s) for s in _stemmer(self.name).stemWords(kept)]
        return [t for t in terms if t and not _too_long(t)]

    def record(self) -> dict[str, Any]:
        """What an index stores of its analyzer: the name and chain version it is read back by,
        and the chain spelled out for a reader of the metadata."""
        if self.legacy:
            return {"name": LEGACY, "chain": "NFKC, lowercase, \\w+ and ? tokens"}
        stop = STOP_WORDS.get(self.name)
        return {"name": self.name, "version": VERSION,
                "chain": f"NFKC, Unicode words, lowercase, {f'{len(stop)} stop words' if stop else 'no stop words'}, "
                         + ("ASCII folding, " if self.name in FOLD_BEFORE_STEMMING else "")
                         + f"Snowball {self.name} stemmer (PyStemmer)"
                         + ("" if self.name in FOLD_BEFORE_STEMMING else ", ASCII folding")}

    @classmethod
    def from_record(cls, record: Any, where: str) -> "Analyzer":
        """The analyzer an index recorded (``None``: an index from before analyzers, ``legacy``).
        A record this version cannot read is an error naming ``where`` (the index)."""
        if record is None:
            return cls(LEGACY)
        if not isinstance(record, Mapping) or not isinstance(record.get("name"), str):
            raise ConfigError(f"{where}: the BM25 analyzer record {record!r} is not an object with a name")
        if record["name"] != LEGACY and record.get("version") != VERSION:
            raise ConfigError(f"{where}: written with version {record.get('version')!r} of the {record['name']} "
                              f"analyzer; this hybrid-qpr reads version {VERSION}: upgrade hybrid-qpr")
        try:
            return cls(record["name"])
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def legacy_note(where: str, fix: str) -> str:
    """The line said of an index on the legacy analyzer, with ``fix``, the command that moves it."""
    return (f"BM25 in {where} runs the legacy analyzer (words and '?', lowercase: no stemming, stop words or "
            f"accent folding); to move it to the English analyzer: {fix}")


def refuse_another(current: Analyzer, wanted: Analyzer, where: str, fix: str) -> None:
    """Refuse to add ``wanted``'s terms to ``where``, whose BM25 terms are ``current``'s: BM25
    over two analyzers' terms would match neither's queries. ``fix`` says what to do instead."""
    if wanted != current:
        raise ConfigError(f"{where} analyses BM25 text with the {current.name} analyzer, not {wanted.name}. Fix: "
                          f"leave out --language, or {fix}")


def get_analyzer(name: str | None) -> Analyzer:
    """The analyzer called ``name`` (``None``: the default language, English)."""
    return Analyzer(DEFAULT_LANGUAGE if name is None else str(name).strip().lower())


_local = threading.local()  # a PyStemmer stemmer is not safe to share between threads


def _stemmer(language: str):
    stemmers = getattr(_local, "stemmers", None)
    if stemmers is None:
        stemmers = _local.stemmers = {}
    found = stemmers.get(language)
    if found is None:
        import Stemmer  # PyStemmer, a core dependency

        found = stemmers[language] = Stemmer.Stemmer(language)
    return found
