"""The vector base (``vectorbase.py``): one HNSW graph over the large segments of an ``auto``
index, kept up to date by every commit. Lists equal exact search, small ingests leave the graph
alone, tombstones and dead nodes are never returned, readers keep their snapshot, damage is
found and repaired, a failed write leaves the previous commit. Real encoder; the Flat threshold
is lowered so that a few hundred questions make base segments, and efSearch is stored above
the node count, so the graph is searched exhaustively and its lists are exact."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_qpr.backends.local import LocalIndex, SearchSettings
from hybrid_qpr.backends.local import vectorbase
from hybrid_qpr.backends.local.check import check_index
from hybrid_qpr.backends.local.commit import write_manifest
from hybrid_qpr.backends.local.writer import knn_note
from hybrid_qpr.errors import ArtifactError, IndexDamagedError
from hybrid_qpr.types import Document, QueryVector

THRESHOLD = 40  # segments of at least this many documents join the base
EXHAUSTIVE = SearchSettings(ef_search=512)
QUERIES = ["how do i change my password", "delete my bank account", "who can see my avatar"]


def _index(path, encoder, **kwargs) -> LocalIndex:
    return LocalIndex.create(path, encoder, flat_threshold=THRESHOLD, search=EXHAUSTIVE, **kwargs)


def _lists(idx: LocalIndex, encoder, depth: int = 25) -> list[list[tuple[str, float]]]:
    vectors = encoder.encode(QUERIES, show_progress=False)
    return [[(h.id, round(h.score, 3)) for h in idx.knn(v, depth)] for v in vectors]


@pytest.fixture()
def based(tmp_path, committed_encoder, question_bank) -> LocalIndex:
    """Four ingests of 50 questions: four base segments, one graph."""
    idx = _index(tmp_path / "idx", committed_encoder)
    for start in range(0, 200, 50):
        idx.ingest(question_bank[start:start + 50], committed_encoder, show_progress=False)
    return idx


def test_base_segments_share_one_graph_and_lists_equal_exact_search(based, tmp_path, committed_encoder,
                                                                    question_bank):
    manifest = based.manifest
    assert [e["factory"] for e in manifest["segments"]] == ["base"] * 4
    assert not any((based.path / "segments" / e["name"] / "vectors.faiss").exists() for e in manifest["segments"])
    record = manifest["vector_base"]
    assert record["ranges"] == [[e["name"], 50] for e in manifest["segments"]]
    graphs = sorted(p.name for p in (based.path / "segments").iterdir() if p.name.startswith("v"))
    assert graphs == sorted([record["name"], *(r.split("/")[1] for r in manifest["retained"] if "/v" in r)])
    assert len(graphs) == 2  # the previous commit's graph is kept one more commit, for its readers
    exact = LocalIndex.create(tmp_path / "flat", committed_encoder, faiss="flat")
    exact.ingest(question_bank, committed_encoder, show_progress=False)
    assert _lists(based, committed_encoder) == _lists(exact, committed_encoder)
    vector = committed_encoder.encode([QUERIES[0]], show_progress=False)[0]
    assert based.bm25_and_knn(QUERIES[0], QueryVector.of(vector), 25)[1].hits() == based.knn(vector, 25)
    assert check_index(based.path).problems == []
    based.set_search_settings(ef_search=20)  # query --ef-search: the graph is searched with it
    assert based.base.ef_search == 20 and record["ef_search"] >= 1  # the measured value stays stored


def test_small_ingest_leaves_the_graph_alone_and_is_searched_exactly(based, committed_encoder):
    record = based.manifest["vector_base"]
    graph = based.path / "segments" / record["name"] / "graph.faiss"
    written = graph.stat().st_mtime_ns
    based.ingest([Document("new1", "how do i change my password now")], committed_encoder, show_progress=False)
    assert based.manifest["vector_base"] == record and graph.stat().st_mtime_ns == written
    assert based.segments[-1].entry["factory"] == "Flat"
    vector = committed_encoder.encode(["how do i change my password now"], show_progress=False)[0]
    assert based.knn(vector, 1)[0].id == "new1"


def test_tombstones_and_dead_nodes_are_never_returned(based, committed_encoder, question_bank):
    vector = committed_encoder.encode([question_bank[3].text], show_progress=False)[0]
    assert based.knn(vector, 1)[0].id == question_bank[3].id
    before = LocalIndex.open(based.path)  # a reader of the earlier commit keeps its snapshot
    assert based.delete([question_bank[3].id]) == 1
    assert question_bank[3].id not in {h.id for h in based.knn(vector, 200)}
    assert before.knn(vector, 1)[0].id == question_bank[3].id
    # every row of the first segment deleted: the segment leaves the index, its nodes stay dead
    graph = based.manifest["vector_base"]["name"]
    assert based.delete([d.id for d in question_bank[:50]]) == 49
    assert based.manifest["vector_base"]["ranges"][0] == [None, 50]
    assert based.manifest["vector_base"]["name"] == graph  # the same graph: only the record changed
    hits = based.knn(vector, 200)
    assert len(hits) == 150 and not {h.id for h in hits} & {d.id for d in question_bank[:50]}
    assert before.knn(vector, 1)[0].id == question_bank[3].id
    before.close()
    # dead nodes at least as many as live ones: the next graph is rebuilt from the live segments
    based.delete([d.id for d in question_bank[50:150]])
    based.ingest([Document(f"n{i}", f"a new question number {i} about my avatar") for i in range(60)],
                 committed_encoder, show_progress=False)
    ranges = based.manifest["vector_base"]["ranges"]
    assert all(name is not None for name, _ in ranges) and sum(c for _, c in ranges) == 110
    assert based.manifest["vector_base"]["name"] != graph
    assert based.count() == 110 and len(based.knn(vector, 500)) == 110


def test_optimize_rebuilds_one_graph_and_old_files_go_a_commit_later(based, committed_encoder):
    old = based.manifest["vector_base"]["name"]
    lists = _lists(based, committed_encoder)
    based.optimize()
    [segment] = based.manifest["segments"]
    assert based.manifest["vector_base"]["ranges"] == [[segment["name"], 200]]
    assert (based.path / "segments" / old).is_dir()  # kept one more commit for readers of the previous one
    assert _lists(based, committed_encoder) == lists
    based.ingest([Document("x", "one more question")], committed_encoder, show_progress=False)
    assert not (based.path / "segments" / old).exists()


def test_a_damaged_graph_is_reported_and_rebuilt_by_optimize(based, committed_encoder):
    lists = _lists(based, committed_encoder)
    graph = based.path / "segments" / based.manifest["vector_base"]["name"] / "graph.faiss"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    problems = check_index(based.path).problems
    assert len(problems) == 1 and "CRC32" in problems[0].what and "optimize" in problems[0].fix
    with pytest.raises(IndexDamagedError, match="graph.faiss has changed since it was written"):
        LocalIndex.open(based.path).knn(committed_encoder.encode(["x"], show_progress=False)[0], 3)
    based.close()
    repaired = LocalIndex.open(based.path)
    repaired.optimize()
    assert check_index(based.path).problems == [] and _lists(repaired, committed_encoder) == lists


def test_a_failed_graph_write_leaves_the_previous_commit(based, committed_encoder, monkeypatch):
    generation, count = based.manifest["generation"], based.count()

    def killed(*args, **kwargs):
        raise RuntimeError("killed while the graph was written")

    monkeypatch.setattr(vectorbase, "file_record", killed)  # the graph file is written, not yet renamed
    with pytest.raises(RuntimeError, match="killed"):
        based.ingest([Document(f"k{i}", f"question {i} about my password") for i in range(THRESHOLD)],
                     committed_encoder, show_progress=False)
    monkeypatch.undo()
    reopened = LocalIndex.open(based.path)  # removes what the failed ingest left
    assert reopened.manifest["generation"] == generation and reopened.count() == count
    committed = {e["name"] for e in reopened.manifest["segments"]} | {reopened.manifest["vector_base"]["name"]}
    committed |= {rel.split("/")[1] for rel in reopened.manifest["retained"]}
    assert {p.name for p in (based.path / "segments").iterdir()} == committed  # no temporary or new files left
    assert check_index(based.path).problems == []


def test_hnsw_and_small_indexes_keep_one_faiss_index_per_segment(tmp_path, committed_encoder, question_bank):
    hnsw = LocalIndex.create(tmp_path / "h", committed_encoder, faiss="hnsw", flat_threshold=THRESHOLD)
    hnsw.ingest(question_bank[:60], committed_encoder, show_progress=False)
    small = LocalIndex.create(tmp_path / "s", committed_encoder)
    small.ingest(question_bank[:60], committed_encoder, show_progress=False)
    for idx, factory in ((hnsw, "HNSW32"), (small, "Flat")):
        assert idx.manifest["vector_base"] is None and idx.base is None
        assert idx.manifest["segments"][0]["factory"] == factory
    assert np.isfinite(hnsw.knn(committed_encoder.encode(["x"], show_progress=False)[0], 3)[0].score)


def test_locality_order_lists_neighbours_together():
    from hybrid_qpr.backends.local.locality import LEAF, locality_order

    rng = np.random.default_rng(3)
    blobs = np.repeat(np.arange(40), 100)
    vectors = (rng.normal(size=(40, 16)) * 10)[blobs] + rng.normal(size=(4000, 16))
    shuffle = rng.permutation(4000)
    vectors, blobs = vectors[shuffle].astype(np.float32), blobs[shuffle]
    order = locality_order(vectors)
    assert np.array_equal(np.sort(order), np.arange(4000))
    changes = lambda labels: int((labels[1:] != labels[:-1]).sum())  # noqa: E731
    assert changes(blobs[order]) < 200 < 3000 < changes(blobs)  # each blob nearly in one run, against ~3,900
    assert locality_order(vectors[:2 * LEAF - 1]) is None  # one cell: the stored order is kept


def test_storing_a_graph_in_order_moves_its_rows_in_place_as_faiss_would_copy_them():
    import faiss

    from hybrid_qpr.backends.local.locality import store_in_order

    vectors = np.random.default_rng(5).normal(size=(3000, 16)).astype(np.float32)
    graph = faiss.IndexHNSWFlat(16, 8)
    graph.add(vectors)
    order = np.random.default_rng(6).permutation(3000).astype(np.int64)
    copied = faiss.clone_index(graph)
    copied.permute_entries(order)
    store_in_order(graph, order)
    stored = faiss.rev_swig_ptr(faiss.downcast_index(graph.storage).get_xb(), 3000 * 16).reshape(3000, 16)
    assert np.array_equal(stored, vectors[order])
    for ef in (16, 64):
        graph.hnsw.efSearch = copied.hnsw.efSearch = ef
        ours, theirs = graph.search(vectors[:300] + 0.01, 10), copied.search(vectors[:300] + 0.01, 10)
        assert np.array_equal(ours[1], theirs[1]) and np.array_equal(ours[0], theirs[0])


def test_a_new_graph_stores_its_nodes_in_locality_order_and_lists_stay_exact(tmp_path, committed_encoder,
                                                                             question_bank):
    idx = _index(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank[:180], committed_encoder, show_progress=False)
    exact = LocalIndex.create(tmp_path / "flat", committed_encoder, faiss="flat")
    exact.ingest(question_bank[:180], committed_encoder, show_progress=False)
    record = idx.manifest["vector_base"]
    order = np.load(idx.path / "segments" / record["name"] / "order.npy")
    assert set(record["files"]) == {"graph.faiss", "order.npy"}
    assert np.array_equal(np.sort(order), np.arange(180)) and not np.array_equal(order, np.arange(180))
    assert _lists(idx, committed_encoder) == _lists(exact, committed_encoder)
    gone = [d.id for d in question_bank[:180:7]]  # tombstones: the live-node bitmap is in the graph's order
    assert idx.delete(gone) == exact.delete(gone) == len(gone)
    assert _lists(idx, committed_encoder) == _lists(exact, committed_encoder)
    idx.ingest(question_bank[180:], committed_encoder, show_progress=False)  # 20 more: a Flat segment
    more = [Document(f"m{i}", f"question {i} about my password and my avatar") for i in range(THRESHOLD)]
    idx.ingest(more, committed_encoder, show_progress=False)  # a base segment: added to the graph
    exact.ingest(question_bank[180:] + more, committed_encoder, show_progress=False)
    record = idx.manifest["vector_base"]
    grown = np.load(idx.path / "segments" / record["name"] / "order.npy")
    assert np.array_equal(grown, np.concatenate([order, np.arange(180, 180 + THRESHOLD)]))
    assert _lists(idx, committed_encoder) == _lists(exact, committed_encoder)
    assert check_index(idx.path).problems == []
    stored = idx.path / "segments" / record["name"] / "order.npy"
    np.save(stored, grown[::-1].copy())  # same size, other bytes
    problems = check_index(idx.path).problems
    assert len(problems) == 1 and "order.npy" in problems[0].what and "CRC32" in problems[0].what
    lists = _lists(exact, committed_encoder)
    with pytest.raises(IndexDamagedError, match="order.npy has changed since it was written"):
        LocalIndex.open(idx.path).knn(committed_encoder.encode(["x"], show_progress=False)[0], 3)
    idx.close()
    repaired = LocalIndex.open(idx.path)  # opens: the damage stops searches, not the repair
    repaired.optimize()
    assert check_index(idx.path).problems == [] and _lists(repaired, committed_encoder) == lists


def test_optimize_stores_an_older_graph_in_locality_order_without_rebuilding_it(tmp_path, committed_encoder,
                                                                               question_bank, monkeypatch):
    monkeypatch.setattr(vectorbase, "locality_order", lambda vectors: None)  # a graph as written before the order
    idx = _index(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    monkeypatch.undo()
    idx.close()
    manifest = {k: v for k, v in idx.manifest.items() if k != "manifest_crc32"}
    write_manifest(idx.path, {**manifest, "format_version": 4})  # a later version's index is refused, not misread
    with pytest.raises(ArtifactError, match="format_version 4 is not supported .this hybrid-qpr reads 2, 3"):
        LocalIndex.open(idx.path)
    assert "is not a format 2 or 3" in check_index(idx.path).problems[0].what
    write_manifest(idx.path, {**manifest, "format_version": 2})  # as the version before the order wrote it
    idx = LocalIndex.open(idx.path)
    old = idx.manifest["vector_base"]
    assert set(old["files"]) == {"graph.faiss"} and vectorbase.unordered(old)
    assert "index optimize" in knn_note(idx) and "locality order" in knn_note(idx)  # what an ingest tells the user
    lists = _lists(idx, committed_encoder)
    segments = idx.manifest["segments"]
    idx.optimize()
    new = idx.manifest["vector_base"]
    assert idx.manifest["segments"] == segments and new["ranges"] == old["ranges"]  # the segment stays as it was
    assert set(new["files"]) == {"graph.faiss", "order.npy"} and not vectorbase.unordered(new)
    assert new["files"]["graph.faiss"]["bytes"] == old["files"]["graph.faiss"]["bytes"]  # the same graph, renumbered
    assert _lists(idx, committed_encoder) == lists and check_index(idx.path).problems == []
    assert idx.manifest["format_version"] == 3  # which a reader of version 2 refuses
    assert "locality order" not in knn_note(idx)
    generation = idx.manifest["generation"]
    idx.optimize()  # nothing left to do
    assert idx.manifest["generation"] == generation
