"""The process's one worker thread for the local index's queries: a hybrid query's BM25 half,
and a share of a large index's BM25 segments (``reading.py``, ``ranking.shared_with_worker``).

A task is handed over through a queue and its end signalled through a bare lock, which the
asking thread waits on. A ``ThreadPoolExecutor`` does the same with a ``Future`` (a condition
variable with its own lock), a work item and an idle-thread check: 52.7-65.2 against 46.9-49.7
us per round trip of an empty task on this project's 2-core machine, and its ``submit`` sits on a hybrid query's critical
path: the encoding starts after it."""

from __future__ import annotations

import _thread
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

_WAITING, _RUNNING, _CANCELLED = 0, 1, 2
_STATE = threading.Lock()  # a task's step from waiting to running or cancelled


class Task:
    """One call handed to the worker: ``result()`` waits for it, ``cancel()`` withdraws it
    while it has not started."""

    __slots__ = ("_call", "_args", "_done", "_value", "_error", "_state")

    def __init__(self, call: Callable[..., Any], args: tuple):
        self._call, self._args = call, args
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released when the call has returned or raised
        self._value: Any = None
        self._error: BaseException | None = None
        self._state = _WAITING

    def cancel(self) -> bool:
        """True when the task had not started (it never will); False once it runs or ran."""
        with _STATE:
            if self._state != _WAITING:
                return False
            self._state = _CANCELLED
        return True

    def result(self) -> Any:
        """The call's value (its exception raised here), once it has run."""
        with self._done:  # free once the worker has released it: waits until then
            pass
        if self._error is not None:
            raise self._error
        return self._value

    def run(self) -> None:
        with _STATE:
            if self._state != _WAITING:
                return
            self._state = _RUNNING
        try:
            self._value = self._call(*self._args)
        except BaseException as exc:  # noqa: BLE001  (handed to the thread that asked, by result())
            self._error = exc
        finally:
            self._done.release()


class Worker:
    """One daemon thread running submitted tasks in order."""

    def __init__(self, name: str):
        self._tasks: queue.SimpleQueue[Task] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def submit(self, call: Callable[..., Any], *args: Any) -> Task:
        task = Task(call, args)
        self._tasks.put(task)
        return task

    def _serve(self) -> None:
        while True:
            self._tasks.get().run()


_WORKER: list[Worker] = []
_WORKER_LOCK = threading.Lock()


def query_worker() -> Worker:
    """The process's worker (started on first use, once even when reader threads ask at the
    same moment; a forked child starts its own, its parent's thread not being there)."""
    if not _WORKER:
        with _WORKER_LOCK:
            if not _WORKER:
                _WORKER.append(Worker("hybrid-qpr-query"))
    return _WORKER[0]


def _forget_worker() -> None:
    """In a forked child: no worker yet, and locks that no thread of the child holds."""
    global _WORKER_LOCK, _STATE
    _WORKER.clear()
    _WORKER_LOCK, _STATE = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)
