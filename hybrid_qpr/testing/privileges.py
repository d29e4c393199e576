"""A block run as uid/gid nobody, so that a test sees file modes refuse a write even when the
suite runs as root (root ignores them, and CI runs as root)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

NOBODY = 65534


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Run the block as nobody when the tests run as root; as anyone else, the modes already apply."""
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
