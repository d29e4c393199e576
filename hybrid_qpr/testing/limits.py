"""What the operating system refuses, made to happen in a test: a write past a file size (as on a
full disk) and a write that file modes forbid, even when the suite runs as root (root ignores
them, and CI runs as root)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Iterator

NOBODY = 65534


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Run the block as uid/gid nobody when the tests run as root; as anyone else, the modes
    already apply."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """This process may write no file larger than ``limit`` bytes (RLIMIT_FSIZE: the write
    fails with EFBIG, as on a full disk; SIGXFSZ ignored). Works as root and in any container."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
