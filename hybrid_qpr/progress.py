"""Progress on stderr for every long step: a rich bar on a terminal; elsewhere (a log file, a
pipe, CI) a plain line every ``HYBRID_QPR_PROGRESS_SECONDS`` seconds (default 30; 0 = every item)
and one when the step ends, so a long run off a terminal is never silent. A step that ends
before the first interval prints nothing off a terminal. Counts are of what the step handles
(documents, not batches: ``weight``), with an estimate of the time left when the total is known.

The steps deep inside a commit (a graph build, the efSearch calibration, the BM25 postings)
have no ``show_progress`` argument of their own: they show progress (``steps``) while the
caller that has one runs inside ``shown()``."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

PLAIN_SECONDS_VARIABLE = "HYBRID_QPR_PROGRESS_SECONDS"
DEFAULT_PLAIN_SECONDS = 30.0
STEPS_FROM = 10_000  # documents from which a step inside a commit shows its progress (``steps``)
_SHOWN: contextvars.ContextVar[bool] = contextvars.ContextVar("hybrid_qpr_progress_shown", default=False)


def track(items: Iterable[T], total: int | None = None, description: str = "working",
          status: Callable[[], str] | None = None, weight: Callable[[T], int] | None = None) -> Iterator[T]:
    """Yield ``items`` while progress (count, rate, ETA) is shown on stderr.

    ``status``, if given, is called after each item and its text is shown after the
    description (e.g. the running training loss). ``weight(item)``: how many units (documents)
    an item counts for, once it is done; ``total`` counts units then. Default: one each.
    """
    from rich.console import Console

    console = Console(stderr=True)
    if console.is_terminal:
        yield from _bar(items, total, description, status, console, weight)
    else:
        yield from _plain(items, total, description, status, _plain_seconds(), weight)


@contextlib.contextmanager
def shown(on: bool = True) -> Iterator[None]:
    """Inside, ``steps`` shows progress (``on``); outside, it is silent."""
    token = _SHOWN.set(on)
    try:
        yield
    finally:
        _SHOWN.reset(token)


def steps(items: Iterable[T], total: int | None, description: str,
          weight: Callable[[T], int] | None = None, documents: int | None = None) -> Iterable[T]:
    """``track`` inside ``shown()`` for a step over at least ``STEPS_FROM`` documents
    (``documents``, default ``total``: a small ingest's steps take moments, and a bar for each
    would bury the encoding's); ``items`` as they are otherwise."""
    size = total if documents is None else documents
    return track(items, total, description, weight=weight) if _SHOWN.get() and (size or 0) >= STEPS_FROM else items


def _plain_seconds() -> float:
    raw = os.environ.get(PLAIN_SECONDS_VARIABLE, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else DEFAULT_PLAIN_SECONDS
    except ValueError:
        return DEFAULT_PLAIN_SECONDS


def _bar(items, total, description, status, console, weight):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            done = 1 if weight is None else weight(item)
            if status is None:
                progress.advance(task, done)
            else:
                progress.update(task, advance=done, description=f"{description} {status()}")


def plain_line(description: str, done: int, total: int | None, elapsed: float, status: str = "") -> str:
    """``encoding: 1,200/5,000 (24%), 12 s, 100/s, about 38 s left [status]``."""
    rate = done / elapsed if elapsed > 0 else 0.0
    parts = [f"{done:,}/{total:,} ({100 * done / total:.0f}%)" if total else f"{done:,}", f"{elapsed:.0f} s"]
    if rate:
        parts.append(f"{rate:,.1f}/s")
        if total and done < total:
            parts.append(f"about {(total - done) / rate:.0f} s left")
    return f"{description}: {', '.join(parts)}" + (f" {status}" if status else "")


def _plain(items, total, description, status, every, weight):
    start = last = time.monotonic()
    done = 0
    printed = False
    for item in items:
        yield item
        done += 1 if weight is None else weight(item)
        now = time.monotonic()
        if now - last >= every:
            print(plain_line(description, done, total, now - start, status() if status else ""), file=sys.stderr,
                  flush=True)
            last, printed = now, True
    if printed:
        print(plain_line(description, done, total, time.monotonic() - start, status() if status else "") + " done",
              file=sys.stderr, flush=True)
