"""The file system's refusals of a local index's reads and writes, as one line each: a full
disk, a file-size limit (``ulimit -f``), a read-only mount, a permission problem.

NumPy, SQLite and FAISS report them each in their own way (an ``OSError`` with or without an
errno, ``disk I/O error``, a ``RuntimeError`` quoting ``strerror``), so a failed write is
diagnosed from the exception and, when that is not conclusive, from the state it left: the
free space on the device, or a file that reached the size limit.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import sqlite3
from pathlib import Path

from hybrid_qpr.errors import IndexStorageError

MB = 1 << 20
_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_ACCESS_ERRNOS = {errno.EACCES, errno.EPERM}
_SPACE_TEXTS = ("No space left", "Disk quota exceeded", "database or disk is full")


def _mb(size: int) -> str:
    return f"{size / MB:,.1f} MB"


def size_limit() -> int | None:
    """This process's file-size limit in bytes (``ulimit -f``), or ``None`` when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def _largest_file(directory: Path) -> int:
    try:
        return max((p.stat().st_size for p in directory.rglob("*") if p.is_file()), default=0)
    except OSError:
        return 0


def _errno_of(exc: BaseException) -> int | None:
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    text = str(exc)
    for number in (*_SPACE_ERRNOS, errno.EFBIG, errno.EROFS, *_ACCESS_ERRNOS):
        if f"({os.strerror(number)})" in text or text.endswith(os.strerror(number)):
            return number  # FAISS quotes strerror in its message
    return None


def write_refusal(exc: BaseException, target: Path, needed: int | None = None) -> IndexStorageError | None:
    """The ``IndexStorageError`` for ``exc``, raised while writing ``target`` (a file or the
    directory being filled), or ``None`` when ``exc`` is not a refusal of the file system.
    ``needed``: the bytes the whole write needs (a lower bound), for the message."""
    if not isinstance(exc, (OSError, sqlite3.Error, RuntimeError)):
        return None
    number = _errno_of(exc)
    directory = target if target.is_dir() else target.parent
    need = f"; this write needs at least {_mb(needed)}" if needed else ""
    limit = size_limit()
    if number == errno.EFBIG or (limit is not None and _largest_file(directory) >= limit):
        problem = f"a file reached this process's file-size limit of {limit:,} bytes (ulimit -f){need}"
        return IndexStorageError(f"writing {target}: {problem}", problem=problem,
                                 fix="raise the limit (ulimit -f unlimited) and run the same command again")
    free = _free_bytes(directory)
    if number in _SPACE_ERRNOS or any(t in str(exc) for t in _SPACE_TEXTS) \
            or (free is not None and needed is not None and free < needed):
        problem = f"no space left on the device ({_mb(free or 0)} free{need})"
        return IndexStorageError(f"writing {target}: {problem}", problem=problem,
                                 fix="free space on that device and run the same command again")
    if number == errno.EROFS:
        problem = "the index is on a read-only file system"
        return IndexStorageError(f"writing {target}: {problem}", problem=problem,
                                 fix="queries work on a read-only index; to change it, copy it to a writable place")
    if number in _ACCESS_ERRNOS:
        return access_refusal(target, writing=True)
    return None


def access_refusal(target: Path, *, writing: bool) -> IndexStorageError:
    """Permission denied reading or writing ``target`` (not damage: the file may be intact)."""
    owner = ""
    try:
        owner = f" (owned by uid {target.stat().st_uid})"
    except OSError:
        pass
    verb = "writing" if writing else "reading"
    problem = f"permission denied {verb} {target}{owner}"
    return IndexStorageError(problem, problem=problem,
                             fix=f"run as a user allowed to {'write' if writing else 'read'} it, or fix its permissions")


def _free_bytes(directory: Path) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def unreadable(path: Path) -> bool:
    """True when ``path`` exists but this process may not read it (permissions, not damage)."""
    return path.exists() and not os.access(path, os.R_OK)
