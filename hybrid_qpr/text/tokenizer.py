"""Word tokenizer and vocabulary with the hashing trick (SDML paper, section 4.1).

Ids: 0 is padding; 1..V are the V most frequent training words; a word outside the
vocabulary goes to one of m hash bins, id ``V + 1 + stable_hash(word) % m``. The same
code maps text to ids at training time (torch) and at inference time (onnxruntime),
so the two can never drift apart.
"""

from __future__ import annotations

import json
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.errors import ArtifactError, ConfigError

PAD_ID = 0
FORMAT = "hybrid-qpr-word-vocab"
FORMAT_VERSION = 1

# Unicode word characters, or a question mark (kept: it marks questions apart from statements).
# The OpenSearch mapping's analyzer runs the same pattern (Java, UNICODE_CHARACTER_CLASS).
TOKEN_PATTERN = r"\w+|\?"
_TOKEN_RE = re.compile(TOKEN_PATTERN)


def tokenize(text: str) -> list[str]:
    """Lowercase, NFKC-normalise and split ``text`` into words and ``?`` marks."""
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower())


def stable_hash(word: str) -> int:
    """CRC-32 of the UTF-8 bytes: stable across processes, unlike the salted ``hash()``."""
    return zlib.crc32(word.encode("utf-8"))


class Vocabulary:
    """The top-V words plus ``hash_bins`` buckets for every other word."""

    def __init__(self, words: Sequence[str], hash_bins: int = 5000, max_length: int = 64):
        if hash_bins < 1:
            raise ConfigError(f"hash_bins={hash_bins}: must be >= 1 (the SDML paper uses m=5000)")
        if max_length < 1:
            raise ConfigError(f"max_length={max_length}: must be >= 1")
        self.words = list(words)
        self.hash_bins = int(hash_bins)
        self.max_length = int(max_length)
        self._ids = {w: i + 1 for i, w in enumerate(self.words)}
        if len(self._ids) != len(self.words):
            raise ConfigError("vocabulary words must be unique")

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        top_words: int = 50_000,
        hash_bins: int = 5000,
        max_length: int = 64,
        min_count: int = 1,
    ) -> "Vocabulary":
        """Count words in ``texts`` and keep the ``top_words`` most frequent (ties by word)."""
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text))
        ranked = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        return cls(ranked[:top_words], hash_bins=hash_bins, max_length=max_length)

    @property
    def size(self) -> int:
        """Rows the embedding table needs: padding + words + hash bins."""
        return 1 + len(self.words) + self.hash_bins

    def token_id(self, token: str) -> int:
        found = self._ids.get(token)
        if found is not None:
            return found
        return len(self.words) + 1 + stable_hash(token) % self.hash_bins

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``'s tokens, cut to ``max_length``; an empty text gives ``[]``."""
        return [self.token_id(t) for t in tokenize(text)[: self.max_length]]

    def encode_batch(self, texts: Sequence[str]) -> np.ndarray:
        """int64 array [len(texts), L], right-padded with 0; L >= 1 even for empty texts."""
        encoded = [self.encode(t) for t in texts]
        width = max([1] + [len(e) for e in encoded])
        out = np.zeros((len(encoded), width), dtype=np.int64)
        for row, ids in enumerate(encoded):
            out[row, : len(ids)] = ids
        return out

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "pattern": _TOKEN_RE.pattern,
            "lowercase": True,
            "unicode_normalization": "NFKC",
            "hash": "crc32-utf8",
            "pad_id": PAD_ID,
            "hash_bins": self.hash_bins,
            "max_length": self.max_length,
            "words": self.words,
        }

    def save(self, path: str | Path) -> None:
        """Write JSON atomically (temporary file, then rename)."""
        with atomic_write(path) as fh:
            json.dump(self.to_dict(), fh, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ArtifactError(f"{path}: vocabulary file is missing") from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{path}: vocabulary is not valid JSON ({exc})") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ArtifactError(f"{path}: not a hybrid-qpr word vocabulary (format must be {FORMAT!r})")
        if data.get("pattern") != _TOKEN_RE.pattern:
            raise ArtifactError(f"{path}: written with another tokenizer pattern; re-export the model")
        try:
            return cls(data["words"], hash_bins=data["hash_bins"], max_length=data["max_length"])
        except KeyError as exc:
            raise ArtifactError(f"{path}: vocabulary lacks the field {exc}") from exc
