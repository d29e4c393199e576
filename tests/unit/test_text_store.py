"""The text store (``textstore.py``): a segment's texts and metadata in two flat files, read by
row for result pages instead of SQLite. It returns what ``docs.sqlite`` holds (tombstones
applied), an index written before it is read through SQLite, and ``index optimize`` adds it to
such an index without rebuilding. Damage to its files is in ``test_local_faults.py``."""

from __future__ import annotations

import json

import numpy as np

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.commit import write_manifest
from hybrid_qpr.backends.local.textstore import FILES, TextStore, write_texts
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document

TEXTS = ["how do i change my password?", "", "größe ändern – ça marche? 🙂", "a\nb\tc"]
METADATA = ["{}", '{"lang": "de"}', '{"topic": "ünïcode"}', "{}"]


def test_rows_come_back_as_written(tmp_path):
    write_texts(tmp_path, TEXTS, METADATA)
    with open(tmp_path / "docs.text", "rb") as text:
        store = TextStore(text, np.load(tmp_path / "docs.offsets.npy"))
        assert store.problem(len(TEXTS)) is None
        assert store.rows([2, 0, 3, 1, 2]) == [(TEXTS[i], METADATA[i]) for i in (2, 0, 3, 1, 2)]
        assert store.rows([]) == []
        assert store.problem(5) == "holds (9,) offsets, expected 11"
        store.close()
    np.save(tmp_path / "docs.offsets.npy", np.load(tmp_path / "docs.offsets.npy")[::-1].copy())
    with open(tmp_path / "docs.text", "rb") as text:
        assert TextStore(text, np.load(tmp_path / "docs.offsets.npy")).problem(4) == "its offsets do not fit the text file"
    write_texts(tmp_path, [], [])
    with open(tmp_path / "docs.text", "rb") as text:
        empty = TextStore(text, np.load(tmp_path / "docs.offsets.npy"))
        assert empty.problem(0) is None and empty.rows([]) == []


def test_pages_read_the_store_and_equal_sqlite(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    gone = [d.id for d in question_bank[::9]]
    idx.delete(gone)
    [seg] = idx.segments
    assert set(FILES) <= set(seg.entry["files"]) and seg.texts is not None
    rows = np.random.default_rng(0).choice(seg.count, 60, replace=False).tolist()
    assert sorted(seg.documents_at(rows)) == sorted(seg.rows_at(rows, "id, text, metadata"))
    assert not {doc_id for doc_id, _, _ in seg.documents_at(rows)} & set(gone)
    texts = {d.id: d.text for d in question_bank}
    vector = committed_encoder.encode(["how do i change my password"], show_progress=False)[0]
    page = HybridSearcher(idx, committed_encoder).search("how do i change my password", vector=vector, depth=20)
    assert len(page) == 10 and all(item.text == texts[item.id] for item in page)
    assert all(item.metadata == next(d.metadata for d in question_bank if d.id == item.id) for item in page)


def test_an_index_written_before_reads_sqlite_and_optimize_adds_the_store(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    idx.close()
    manifest = {k: v for k, v in idx.manifest.items() if k != "manifest_crc32"}
    [entry] = manifest["segments"]
    for file in FILES:  # as the version before the store wrote it
        del entry["files"][file]
        (idx.path / "segments" / entry["name"] / file).unlink()
    write_manifest(idx.path, {**manifest, "format_version": 2})
    older = LocalIndex.open(idx.path)
    assert older.segments[0].texts is None
    texts = {d.id: d.text for d in question_bank}
    found = older.documents([d.id for d in question_bank[:20]])
    assert {doc_id: doc.text for doc_id, doc in found.items()} == {d.id: d.text for d in question_bank[:20]}
    hits = older.bm25("how do i change my password", 10)
    vector = committed_encoder.encode(["how do i change my password"], show_progress=False)[0]
    page = HybridSearcher(older, committed_encoder).search("how do i change my password", vector=vector, depth=20)
    generation = older.manifest["generation"]
    older.optimize()
    assert older.manifest["generation"] == generation + 1 and older.manifest["segments"][0]["name"] == entry["name"]
    assert older.segments[0].texts is not None and set(FILES) <= set(older.segments[0].entry["files"])
    assert older.bm25("how do i change my password", 10) == hits
    again = HybridSearcher(older, committed_encoder).search("how do i change my password", vector=vector, depth=20)
    assert again == page and all(item.text == texts[item.id] for item in again)
    older.optimize()  # nothing left to add
    assert older.manifest["generation"] == generation + 1
    assert json.loads((idx.path / "manifest.json").read_text())["format_version"] == 3
    older.ingest([Document("new1", "a brand new question?")], committed_encoder, show_progress=False)
    assert older.segments[-1].texts is not None
