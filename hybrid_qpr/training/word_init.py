"""Start the CNN's word embeddings from the teacher's knowledge of each word (``distill --teacher-words``).

A CNN trained from scratch knows only the words of its training questions: every other word
falls into a shared hash bin, and a word seen a handful of times gets an embedding learned
from a handful of contexts. The teacher knows far more words. Two steps bring that in:

1. the vocabulary gets the teacher's own whole words (``teacher_words``: the WordPiece
   tokens that are complete words for our tokenizer, or the words of a CNN teacher's
   vocabulary), so a word never seen in training still has a row of its own;
2. every word row starts from the teacher's embedding of the word alone, reduced to the
   student's embedding size by PCA (``teacher_word_vectors``): words the teacher puts close
   together start close together, and training moves them from there. Hash bins and padding
   keep their usual start.

This is the usual way a small student borrows a large model's lexical knowledge (word
vectors from the teacher's input side; Tang et al. 2019, "Distilling Task-Specific Knowledge
from BERT into Simple Neural Networks", start their BiLSTM student from pretrained word
vectors); here the vectors come from the teacher itself, so no other download is needed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybrid_qpr.artifacts import ENCODER_TOKENIZER_FILE
from hybrid_qpr.errors import ArtifactError
from hybrid_qpr.text.tokenizer import FORMAT as WORD_VOCABULARY_FORMAT, Vocabulary, tokenize


def teacher_words(teacher_dir: str | Path) -> list[str]:
    """Whole words the teacher's tokenizer knows, in its vocabulary order: for a WordPiece
    tokenizer (``tokenizer.json`` of Hugging Face ``tokenizers``) the tokens that are not
    continuations (``##...``) or specials and that our tokenizer keeps as one word; for a CNN
    teacher, the words of its vocabulary."""
    path = Path(teacher_dir) / ENCODER_TOKENIZER_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArtifactError(f"{path}: the teacher has no tokenizer file") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: tokenizer is not valid JSON ({exc})") from exc
    if data.get("format") == WORD_VOCABULARY_FORMAT:  # a CNN teacher
        candidates = data["words"]
    elif isinstance(data.get("model", {}).get("vocab"), dict):  # WordPiece
        vocab = data["model"]["vocab"]
        candidates = sorted(vocab, key=vocab.get)
    else:
        raise ArtifactError(f"{path}: neither a WordPiece tokenizer nor a hybrid-qpr word vocabulary")
    return [w for w in candidates if not w.startswith("##") and tokenize(w) == [w]]


def extend_vocabulary(vocabulary: Vocabulary, extra: Sequence[str]) -> Vocabulary:
    """``vocabulary`` with the words of ``extra`` it lacks appended (its own ids unchanged)."""
    known = set(vocabulary.words)
    added = [w for w in dict.fromkeys(extra) if w not in known]
    return Vocabulary(vocabulary.words + added, hash_bins=vocabulary.hash_bins, max_length=vocabulary.max_length)


def teacher_word_vectors(encoder, words: Sequence[str], dim: int, batch_size: int = 1024) -> np.ndarray:
    """The teacher's vector of each word alone, projected on its ``dim`` principal components
    over these words and scaled to unit variance per component (the scale of a fresh
    ``nn.Embedding``), float32 [len(words), dim]. Components beyond the teacher's own size are zero."""
    vectors = np.asarray(encoder.encode(list(words), batch_size=batch_size), dtype=np.float64)
    centred = vectors - vectors.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    projected = centred @ components[:dim].T
    projected /= projected.std(axis=0, keepdims=True) + 1e-12
    out = np.zeros((len(words), dim), dtype=np.float32)
    out[:, :projected.shape[1]] = projected
    return out


def init_word_embeddings(model, encoder) -> int:
    """Set the embedding row of every vocabulary word of ``model`` (a ``CNNModel``) to the
    teacher's vector of that word (``teacher_word_vectors``); returns the rows set."""
    import torch

    words = model.vocabulary.words
    if not words:
        return 0
    vectors = teacher_word_vectors(encoder, words, model.embedding.embedding_dim)
    with torch.no_grad():
        model.embedding.weight[1:1 + len(words)] = torch.from_numpy(vectors)  # row 0 is padding
    return len(words)
