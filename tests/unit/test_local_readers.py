"""One ``LocalIndex`` object shared by threads: each query reads through a reader that holds one
commit, while the same object's writer ingests, deletes, merges and optimizes. Every query
succeeds and every answer is a page of one committed state; a segment a commit drops stays
open for the readers still reading it and is closed when the last of them is done."""

from __future__ import annotations

import random
import threading
import time

import pytest

from hybrid_qpr.backends.base import IngestInterrupted
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.errors import IndexDamagedError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document

RUN_S = 3.0  # at least this long, and until the writer has done each kind of write twice
MAX_S = 30.0
MODES = ("bm25", "knn", "hybrid")


def test_one_index_object_answers_from_committed_states_while_its_writer_commits(tmp_path, committed_encoder,
                                                                                 question_bank):
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    first = question_bank[:40]
    index.ingest(first, committed_encoder, show_progress=False, segment_docs=8)
    live = {d.id: d.text for d in first}  # what the writer has committed last
    states = [frozenset(live.items())]  # every committed state (merges and optimize change no document)
    writes = {"ingest": 0, "delete": 0, "optimize": 0}
    answers: dict[str, list[frozenset]] = {mode: [] for mode in MODES}
    failures: list[str] = []
    stop = threading.Event()

    def guarded(work, name):
        def run():
            try:
                work()
            except BaseException as exc:  # any failure of a reader or the writer fails the test
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                stop.set()
        return threading.Thread(target=run, name=name)

    def write_loop():
        rng = random.Random(1)
        round_ = 0
        while not stop.is_set():
            round_ += 1
            # small segments, so the size-tiered merge runs after some commits; optimize every other round
            picked = rng.sample(question_bank, 6)
            changed = [Document(d.id, f"{d.text} v{round_}", d.metadata) for d in picked]
            index.ingest(changed, committed_encoder, show_progress=False, segment_docs=3)
            live.update((d.id, d.text) for d in changed)
            states.append(frozenset(live.items()))
            gone = rng.sample(sorted(live), 4)
            assert index.delete(gone) == 4
            for doc_id in gone:
                del live[doc_id]
            states.append(frozenset(live.items()))
            writes["ingest"] += 1
            writes["delete"] += 1
            if round_ % 2 == 0:
                index.optimize()
                writes["optimize"] += 1

    def read_loop(mode: str, seed: int):
        def run():
            rng = random.Random(seed)
            searcher = HybridSearcher(index, committed_encoder)
            while not stop.is_set():
                # kNN pages filtered, hybrid ones paged: the filter's rows and the later pages come from one commit too
                more = {"knn": {"filters": {"lang": "en"}, "offset": rng.choice((0, 2))},
                        "hybrid": {"offset": rng.choice((0, 5))}}.get(mode, {})
                results = searcher.search(rng.choice(question_bank).text, mode=mode, top_k=5, **more)
                assert results, f"{mode}: no results"
                assert mode != "knn" or all(r.metadata["lang"] == "en" for r in results)
                answers[mode].append(frozenset((r.id, r.text) for r in results))
        return run

    threads = [guarded(write_loop, "writer")] + [guarded(read_loop(mode, seed), mode)
                                                  for seed, mode in enumerate(MODES)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    while not stop.is_set():
        spent = time.monotonic() - started
        if spent > MAX_S or (spent > RUN_S and min(writes.values()) >= 2):
            break
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[:5]
    assert min(writes.values()) >= 2, writes
    assert all(answers.values()), {mode: len(found) for mode, found in answers.items()}
    for mode, found in answers.items():  # each page: ids and texts that one committed state held together
        mixed = [page for page in found if not any(page <= state for state in states)]
        assert not mixed, f"{mode}: {len(mixed)} of {len(found)} pages match no committed state, e.g. {sorted(mixed[0])}"
    print("pages per mode:", {mode: len(found) for mode, found in answers.items()}, "writes:", writes,
          "commits:", index.manifest["generation"])
    with index.reader() as reader:  # and the index holds the last state
        assert frozenset((i, d.text) for i, d in reader.documents(sorted(live)).items()) == states[-1]
        assert reader.count() == len(live)


def test_a_segment_a_commit_drops_closes_when_its_last_reader_goes(tmp_path, committed_encoder, question_bank):
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(question_bank[:30], committed_encoder, show_progress=False, segment_docs=10)
    reader = index.reader()
    old = reader.segments
    assert len(old) == 3 and all(index._files.held(seg) == 1 for seg in old)  # one snapshot: the index's and the reader's
    hits = reader.bm25("how do i change my password", 5)
    index.optimize()  # one new segment; the three old ones dropped from the index's commit
    assert len(index.segments) == 1 and not set(index.segments) & set(old)
    assert all(index._files.held(seg) == 1 for seg in old)  # the reader's snapshot still holds them: open
    assert set(reader.documents([h.id for h in hits])) == {h.id for h in hits}
    reader.close()
    assert all(index._files.held(seg) == 0 for seg in old)
    with pytest.raises(IndexDamagedError, match="closed database"):  # what a query met when a commit closed it
        old[0].sql("SELECT count(*) FROM docs")
    [current] = index.segments
    assert index._files.held(current) == 1
    index.close()  # no reader holds the current commit: its segment closes now
    assert index._files.held(current) == 0 and not index.segments


def test_an_ingest_reports_its_commit_and_ctrl_c_reports_none(tmp_path, committed_encoder, question_bank):
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    report = index.ingest(question_bank[:10], committed_encoder, show_progress=False)
    assert report.generation == index.manifest["generation"] == 1

    def interrupted():
        yield from question_bank[10:15]
        raise KeyboardInterrupt

    with pytest.raises(IngestInterrupted) as caught:
        index.ingest(interrupted(), committed_encoder, show_progress=False)
    assert caught.value.report.generation is None and index.manifest["generation"] == 1 and index.count() == 10
