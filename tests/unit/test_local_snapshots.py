"""Snapshot reads of the local index: readers never fail while writers commit and merge.

Two writers (ingest of small segments, so the merge policy runs; delete; optimize) commit
continuously while readers query in every mode, some on one long-lived ``LocalIndex`` (a
snapshot that later commits and merges delete the files of), some opening the index afresh
for each query (racing with commits while they open). Bounded in time; zero failed queries."""

from __future__ import annotations

import random
import threading
import time

import numpy as np

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document

RUN_S = 8.0
MAX_S = 40.0
WRITES = ("ingest", "delete", "ingest", "optimize")
MODES = ("bm25", "knn", "hybrid", "rerank")


def test_readers_never_fail_while_writers_commit_and_merge(tmp_path, committed_encoder, question_bank):
    index_dir = tmp_path / "idx"
    LocalIndex.create(index_dir, committed_encoder).ingest(question_bank[:60], committed_encoder, show_progress=False,
                                                           segment_docs=6)
    stop = threading.Event()
    failures: list[str] = []
    answered = {mode: 0 for mode in MODES}
    commits = {"ingest": 0, "delete": 0, "optimize": 0}
    count_lock = threading.Lock()

    def guarded(work):
        def run():
            try:
                work()
            except BaseException as exc:  # any failure of a reader or writer fails the test
                failures.append(f"{work.__name__}: {type(exc).__name__}: {exc}")
                stop.set()
        return threading.Thread(target=run)

    def writer(seed: int):
        def write_loop():
            rng = random.Random(seed)
            index = LocalIndex.open(index_dir)
            round_ = 0
            while not stop.is_set():
                kind = WRITES[(round_ + seed) % len(WRITES)]  # the writers take turns through every kind
                round_ += 1
                if kind == "ingest":  # small segments: the size-tiered merge runs after some of these commits
                    picked = rng.sample(question_bank, 12)
                    index.ingest([Document(d.id, f"{d.text} v{seed}.{round_}", d.metadata) for d in picked],
                                 committed_encoder, show_progress=False, wait=True, segment_docs=4)
                elif kind == "delete":
                    index.delete([d.id for d in rng.sample(question_bank, 8)], wait=True)
                else:
                    index.optimize(wait=True)
                with count_lock:
                    commits[kind] += 1
        write_loop.__name__ = f"writer{seed}"
        return write_loop

    def reader(long_lived: bool, seed: int):
        def read_loop():
            rng = random.Random(seed)
            snapshot = LocalIndex.open(index_dir) if long_lived else None
            while not stop.is_set():
                index = snapshot or LocalIndex.open(index_dir)
                searcher = HybridSearcher(index, committed_encoder)
                for mode in MODES:
                    query = rng.choice(question_bank).text
                    results = searcher.search(query, mode=mode, top_k=5)
                    assert len({r.id for r in results}) == len(results)
                    if results:  # every hit's text comes from the same snapshot as its id
                        assert all(r.text for r in results)
                    with count_lock:
                        answered[mode] += 1
                if snapshot is None:
                    index.close()
                else:
                    time.sleep(0.05)  # let commits and merges pass under the open snapshot
            if snapshot is not None:
                assert snapshot.count() == sum(s.live for s in snapshot.segments)
        read_loop.__name__ = f"{'long-lived' if long_lived else 'fresh'} reader{seed}"
        return read_loop

    threads = [guarded(writer(1)), guarded(writer(2)), guarded(reader(True, 3)), guarded(reader(True, 4)),
               guarded(reader(False, 5))]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    while not stop.is_set():  # RUN_S, and on a slow machine until every kind of write happened twice (MAX_S at most)
        spent = time.monotonic() - started
        if spent > MAX_S or (spent > RUN_S and min(commits.values()) >= 2):
            break
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[:5]
    assert all(n > 0 for n in answered.values()), answered
    assert min(commits.values()) >= 2, commits
    print("queries per mode:", answered, "commits:", commits)
    final = LocalIndex.open(index_dir)
    ids = [i for seg in final.segments for i, live in zip(seg.ids_at(np.arange(seg.count)), ~(
        seg.deleted if seg.deleted is not None else np.zeros(seg.count, bool))) if live]
    assert len(ids) == len(set(ids)) == final.count()


def test_a_file_removed_between_its_size_check_and_its_checksum_is_a_replaced_commit(tmp_path, committed_encoder,
                                                                                      question_bank, monkeypatch):
    """The window the test above once hit: a commit removed a segment's BM25 file after the
    opening reader had checked its size but before it read it for the CRC32. That is the race
    ``refresh`` retries on (a newer commit exists), never a bare FileNotFoundError."""
    import pytest

    from hybrid_qpr.backends.local import segment as segment_mod
    from hybrid_qpr.errors import IndexDamagedError

    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(question_bank[:20], committed_encoder, show_progress=False)
    entry = index.manifest["segments"][0]
    monkeypatch.setattr(segment_mod, "file_problems", lambda *args, **kwargs: [])  # the sizes were fine a moment ago
    (index.path / "segments" / entry["name"] / "bm25.tf.npy").unlink()
    with pytest.raises(IndexDamagedError, match="bm25.tf.npy cannot be read"):
        segment_mod.Segment(index.path, entry, index.dim, index.search_settings)
