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
from hybrid_qpr.errors import IndexDamagedError
from hybrid_qpr.types import Document

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
    assert based.bm25_and_knn(QUERIES[0], vector, 25)[1] == based.knn(vector, 25)
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
