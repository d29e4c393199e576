"""Teacher embeddings for distillation, computed once and cached as a memory-mapped ``.npy``.

The cache file is named by a key over the corpus texts (in order) and the teacher's
fingerprint (``hybrid_qpr.encoders.fingerprint``): another corpus or another teacher gets
another file, never stale vectors. The teacher encodes the texts in chunks; after each chunk
the rows are flushed to the ``.npy`` and then the number of finished rows is written
atomically to a ``.progress.json`` beside it, so a killed run continues from the last
finished chunk (rows past it are simply recomputed).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.errors import ArtifactError

log = logging.getLogger(__name__)

CHUNK = 4096


def corpus_fingerprint(texts: Sequence[str]) -> str:
    """sha256 over the texts in order (length-prefixed, so ["ab"] and ["a", "b"] differ)."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:16]


def cache_path(cache_dir: str | Path, corpus_key: str, teacher_key: str) -> Path:
    return Path(cache_dir) / f"teacher-{corpus_key}-{teacher_key}.npy"


def _progress_path(path: Path) -> Path:
    return path.with_name(path.stem + ".progress.json")


def _read_done(path: Path, rows: int) -> int:
    """Rows already finished in ``path`` (0 when there is no usable progress file)."""
    progress = _progress_path(path)
    if not (path.exists() and progress.exists()):
        return 0
    try:
        done = int(json.loads(progress.read_text(encoding="utf-8"))["rows_done"])
    except (ValueError, KeyError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{progress}: unreadable progress file ({exc}); delete it and {path.name} to re-embed") from exc
    return min(max(done, 0), rows)


def teacher_embeddings(encoder, texts: Sequence[str], cache_dir: str | Path, *, chunk: int = CHUNK,
                       show_progress: bool = False) -> np.ndarray:
    """L2-normalised teacher vectors of ``texts`` [n, d] as a read-only memory map.

    ``encoder`` is any ``hybrid_qpr.encoders.Encoder`` (its ``fingerprint`` and ``dim`` key the
    cache). Finished rows are reused; a killed run resumes at the last finished chunk.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_path(cache_dir, corpus_fingerprint(texts), encoder.fingerprint)
    n, dim = len(texts), int(encoder.dim)
    done = _read_done(path, n)
    if done == 0 or not path.exists():
        vectors = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))
        done = 0
    else:
        vectors = np.load(path, mmap_mode="r+")
        if vectors.shape != (n, dim):
            raise ArtifactError(f"{path}: shape {vectors.shape}, expected {(n, dim)}; delete it to re-embed")
    if done < n:
        log.info("teacher: embedding %d of %d texts into %s", n - done, n, path)
    starts = range(done, n, chunk)
    if show_progress and done < n:
        from hybrid_qpr.progress import track

        starts = track(starts, total=len(starts), description="teacher")
    for start in starts:
        block = encoder.encode(list(texts[start : start + chunk]), batch_size=256)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        vectors[start : start + len(block)] = block / np.maximum(norms, 1e-12)
        vectors.flush()
        with atomic_write(_progress_path(path)) as fh:
            fh.write(json.dumps({"rows_done": start + len(block), "rows": n}))
    del vectors
    return np.load(path, mmap_mode="r")

