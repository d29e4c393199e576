"""Progress bars on stderr (rich), quiet when stderr is not a terminal unless asked."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def track(items: Iterable[T], total: int | None = None, description: str = "working",
          status: Callable[[], str] | None = None) -> Iterator[T]:
    """Yield ``items`` while a bar with count, rate and ETA is drawn on stderr.

    ``status``, if given, is called after each item and its text is shown after the
    description (e.g. the running training loss).
    """
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    console = Console(stderr=True)
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
