"""A segment's texts and metadata in two flat files, read by row without SQLite.

Why: every result page reads the text and metadata of its rows. From ``docs.sqlite`` that is a
query per segment and a B-tree descent per row: about 20 us for ten rows of a 124k index when
warm, 53 us after a graph search has filled the CPU caches, 100 us at 1M documents in four
segments (docs/search.md). From a memory map it is two slices per row.

Files (``write_texts``), beside ``docs.sqlite``, which stays the store of record (lookups by
id, merges, ``index check``; these two are rebuilt from it by ``index optimize``)::

    docs.text         UTF-8: each row's text, then its metadata JSON, rows in order
    docs.offsets.npy  int64 [2 * count + 1]: row r's text is bytes offsets[2r]:offsets[2r+1]
                      of docs.text, its metadata offsets[2r+1]:offsets[2r+2]

A segment written before has neither and is read through SQLite, as before.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

TEXT_FILE, OFFSETS_FILE = "docs.text", "docs.offsets.npy"
FILES: tuple[str, ...] = (TEXT_FILE, OFFSETS_FILE)


def write_texts(directory: Path, texts: Sequence[str], metadata: Sequence[str]) -> None:
    """Write ``texts`` and their ``metadata`` JSON texts as ``directory``'s two text files."""
    offsets = np.zeros(2 * len(texts) + 1, dtype=np.int64)
    at = 0
    with open(directory / TEXT_FILE, "wb") as out:
        for row, (text, meta) in enumerate(zip(texts, metadata)):
            for slot, part in ((2 * row + 1, text), (2 * row + 2, meta)):
                data = part.encode("utf-8")
                out.write(data)
                at += len(data)
                offsets[slot] = at
    np.save(directory / OFFSETS_FILE, offsets, allow_pickle=False)


class TextStore:
    """Read access to the two files, through handles opened by the segment (a later commit that
    deletes the files cannot pull them from under a reader)."""

    def __init__(self, text: BinaryIO, offsets: np.ndarray):
        size = text.seek(0, 2)
        self._bytes = mmap.mmap(text.fileno(), size, access=mmap.ACCESS_READ) if size else b""
        self._offsets = offsets

    def problem(self, count: int) -> str | None:
        """What keeps these files from being ``count`` rows' texts (``None``: nothing)."""
        offsets = self._offsets
        if offsets.shape != (2 * count + 1,) or offsets.dtype != np.int64:
            return f"holds {offsets.shape} offsets, expected {2 * count + 1}"
        if offsets[0] != 0 or offsets[-1] != len(self._bytes) or bool((np.diff(offsets) < 0).any()):
            return "its offsets do not fit the text file"
        return None

    def rows(self, rows: Sequence[int]) -> list[tuple[str, str]]:
        """``(text, metadata JSON)`` of each of ``rows``, in that order."""
        starts = 2 * np.asarray(rows, dtype=np.int64)
        bounds = zip(self._offsets[starts].tolist(), self._offsets[starts + 1].tolist(), self._offsets[starts + 2].tolist())
        data = self._bytes
        return [(data[a:b].decode("utf-8"), data[b:c].decode("utf-8")) for a, b, c in bounds]

    def close(self) -> None:
        if isinstance(self._bytes, mmap.mmap):
            self._bytes.close()
