"""2 MB pages for the arrays an HNSW search reads at random: its vectors and its graph links.

A search at efSearch 48 computes about a thousand distances (measured at 124k Quora questions),
each to a vector of 1 KB (256 float32 dims) somewhere in the whole index. With 4 KB pages nearly
every one of them costs a TLB miss on top of its cache misses. Linux backs anonymous memory with
2 MB pages (transparent huge pages) where a process asks for them with ``madvise``, which is the
common system setting (``/sys/kernel/mm/transparent_hugepage/enabled`` = ``madvise``). FAISS
reads an index into ordinary heap memory, so ``back_with_huge_pages`` asks for them afterwards:
``MADV_HUGEPAGE`` marks the ranges, and ``MADV_COLLAPSE`` (Linux 6.1) moves them to 2 MB pages
at once instead of waiting for the kernel's background scan (16 MB per 10 s by default).
Measured on the 2-vCPU build machine (docs/search.md, 2026-11-26): the
graph search at 5M vectors 1,001 -> 786 us (efSearch 384), at 1M 214 -> 194 us, at 124k
199 -> 194 us (efSearch 48; top 30, one thread); a 1M kNN query 0.647 -> 0.597 ms.

The collapse copies the memory (0.03-0.3 s at 124k, 0.2-2.6 s at 1M measured), so it runs on a
background thread at the lowest CPU priority, 32 MB a call: a one-shot ``hybrid-qpr query``
neither waits for it nor, on exit, for more than one call; the searches of a longer-lived
process get faster once it is done (``settle`` waits for it, for benchmarks).
Where the kernel cannot (another OS, an older kernel, THP set to ``never``) nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading
from typing import Any

from hybrid_qpr.errors import require

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # <linux/mman.h> (asm-generic)
HUGE_PAGE = 2 << 20
COLLAPSE_STEP = 16 * HUGE_PAGE  # 32 MB a system call: what an exiting process may wait for

_LIBC: list[Any] = []
_PENDING: list[threading.Thread] = []
_PENDING_LOCK = threading.Lock()  # reader threads may load graphs at once


def _libc() -> Any | None:
    if not sys.platform.startswith("linux"):
        return None
    if not _LIBC:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        _LIBC.append(libc)
    return _LIBC[0]


def hnsw_arrays(index: Any) -> list[tuple[int, int]]:
    """``(address, bytes)`` of an HNSW index's graph links and the codes of its flat storage
    (none for other index types: a flat or IVF scan reads its lists in order)."""
    if not hasattr(index, "hnsw"):
        return []
    faiss = require("faiss", feature="the local index")
    links, storage = index.hnsw.neighbors, faiss.downcast_index(index.storage)
    spans = [(int(links.data()), links.size() * 4)] if links.size() else []  # storage_idx_t: int32
    if isinstance(storage, faiss.IndexFlatCodes) and storage.codes.size():
        spans.append((int(storage.codes.data()), storage.codes.size()))
    return spans


def _whole_pages(address: int, size: int) -> tuple[int, int]:
    """The 2 MB-aligned part of ``[address, address + size)`` as ``(start, length)``."""
    start = (address + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    end = (address + size) & ~(HUGE_PAGE - 1)
    return start, max(0, end - start)


def back_with_huge_pages(index: Any) -> bool:
    """Ask for 2 MB pages under ``index``'s HNSW arrays, collapsed on a background thread.
    False where nothing was asked: not Linux, not HNSW, arrays under 2 MB, or ``madvise`` refused."""
    libc = _libc()
    spans = [span for span in (_whole_pages(*array) for array in hnsw_arrays(index)) if span[1]] if libc else []
    marked = [span for span in spans if libc.madvise(span[0], span[1], MADV_HUGEPAGE) == 0]
    if not marked:
        return False
    # the thread's arguments hold ``index`` until it is done, so the memory stays allocated
    thread = threading.Thread(target=_collapse, args=(libc, marked, index), name="hybrid-qpr-huge-pages", daemon=True)
    with _PENDING_LOCK:  # started before it is listed: ``settle`` cannot join a thread not started
        thread.start()
        _PENDING[:] = [t for t in _PENDING if t.is_alive()] + [thread]
    return True


def _collapse(libc: Any, spans: list[tuple[int, int]], index: Any) -> None:
    """Collapse ``spans`` a ``COLLAPSE_STEP`` at a time, at the lowest CPU priority. A process
    that exits waits for the system call in flight: one call over a 1M graph's 974 MB of
    vectors held ``hybrid-qpr query``'s exit for 2.4 s (measured). ctypes releases the GIL for
    each call; a refused collapse leaves those 4 KB pages."""
    with contextlib.suppress(OSError, AttributeError):  # best effort: queries come first
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    for start, length in spans:
        for offset in range(0, length, COLLAPSE_STEP):
            libc.madvise(start + offset, min(COLLAPSE_STEP, length - offset), MADV_COLLAPSE)


def settle(timeout: float | None = None) -> None:
    """Wait for the collapses started so far (a benchmark measures searches after them)."""
    with _PENDING_LOCK:
        pending = list(_PENDING)
    for thread in pending:
        thread.join(timeout)
