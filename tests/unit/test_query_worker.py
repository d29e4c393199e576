"""The local index's helper thread (``hybrid_qpr.backends.local.worker``): results, errors,
cancellation, and a forked child's own worker."""

from __future__ import annotations

import os
import threading

import pytest

from hybrid_qpr.backends.local.worker import query_worker


def test_results_and_errors_come_back_to_the_asking_thread():
    worker = query_worker()
    assert worker is query_worker()
    assert worker.submit(lambda a, b: (a + b, threading.current_thread().name), 2, 3).result() == (5, "hybrid-qpr-query")
    task = worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        task.result()
    with pytest.raises(ZeroDivisionError):  # asked again: the same answer
        task.result()


def test_a_task_is_cancelled_only_before_it_starts():
    started, release, ran = threading.Event(), threading.Event(), []
    busy = query_worker().submit(lambda: (started.set(), release.wait(10)))
    assert started.wait(10)
    queued = query_worker().submit(ran.append, "queued")
    assert not busy.cancel()  # running
    assert queued.cancel() and not queued.cancel()
    release.set()
    assert busy.result() == (None, True)
    assert query_worker().submit(ran.append, "after").result() is None
    assert ran == ["after"]  # the cancelled task never ran


def test_a_forked_child_gets_its_own_worker():
    assert query_worker().submit(lambda: 1).result() == 1  # the parent's worker is running
    pid = os.fork()
    if pid == 0:  # the child: its parent's thread is not here
        ok = False
        try:
            ok = query_worker().submit(lambda: os.getpid()).result() == os.getpid()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
