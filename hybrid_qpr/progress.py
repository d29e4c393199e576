"""Progress bars on stderr (rich), quiet when stderr is not a terminal unless asked.

``plain_every`` asks: off a terminal (a background job writing to a log file) a plain line
``description: 120/2000 (6%) 0:04:10 elapsed, ETA 1:05:12 status`` is printed every that many
items instead of a bar, so a log shows how far a long job is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def track(items: Iterable[T], total: int | None = None, description: str = "working",
          status: Callable[[], str] | None = None, plain_every: int | None = None) -> Iterator[T]:
    """Yield ``items`` while a bar with count, rate and ETA is drawn on stderr.

    ``status``, if given, is called after each item and its text is shown after the
    description (e.g. the running training loss).
    """
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    console = Console(stderr=True)
    if plain_every and not console.is_terminal:
        yield from _plain_lines(items, total, description, status, plain_every)
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            if status is None:
                progress.advance(task)
            else:
                progress.update(task, advance=1, description=f"{description} {status()}")


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def _plain_lines(items: Iterable[T], total: int | None, description: str, status: Callable[[], str] | None,
                 every: int) -> Iterator[T]:
    import sys
    import time

    start = time.perf_counter()
    done = 0
    for item in items:
        yield item
        done += 1
        if done % every and done != total:
            continue
        elapsed = time.perf_counter() - start
        where = f"{done}/{total} ({100 * done / total:.0f}%)" if total else str(done)
        eta = f", ETA {_clock(elapsed / done * (total - done))}" if total else ""
        extra = f" {status()}" if status is not None else ""
        print(f"{description}: {where} {_clock(elapsed)} elapsed{eta}{extra}", file=sys.stderr, flush=True)
