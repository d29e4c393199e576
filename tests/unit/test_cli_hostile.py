"""The CLI and the local index under hostile input: index paths with every printable ASCII
character, sizes a user can set far beyond the index, and input files that are not what they
claim. Each answer is a result or one error line, never a traceback, and nothing is created or
lost by a refused command."""

from __future__ import annotations

import json
import os
import shutil
import string
import time
from pathlib import Path

import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.testing.cli import one_error_line, run

QUERY = "how do i change my password?"


def write_jsonl(path: Path, docs) -> Path:
    path.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
    return path


# every printable ASCII character but '/' (the separator), with spaces, in one directory name
HOSTILE_NAME = " " + "".join(c for c in string.printable if c.isprintable() and c not in "/") + " %41 end"


@pytest.fixture(scope="module")
def source(tmp_path_factory, question_bank) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("src") / "q.jsonl", question_bank[:60])


@pytest.mark.parametrize("faiss", ["auto", "hnsw"])
def test_an_index_under_a_path_with_every_printable_character_works_everywhere(faiss, source, tmp_path, question_bank):
    index_dir = tmp_path / HOSTILE_NAME / HOSTILE_NAME  # the index itself and its parent
    index_dir.parent.mkdir()
    assert run("ingest", str(source), "--index", str(index_dir), "--faiss", faiss).exit_code == 0
    for mode in ("bm25", "knn", "hybrid", "rerank"):
        result = run("query", QUERY, "--index", str(index_dir), "--mode", mode, "--json")
        assert result.exit_code == 0 and json.loads(result.output)["hits"], (mode, result.output)
    assert "ok:" in run("index", "check", str(index_dir)).output
    assert run("delete", "q000", "--index", str(index_dir)).output.startswith("deleted 1 of 1")
    optimized = run("index", "optimize", str(index_dir))
    assert optimized.exit_code == 0 and "59 documents" in optimized.output, optimized.output
    assert "nothing to repair" in run("index", "repair", str(index_dir)).output
    checked = run("index", "check", str(index_dir))
    assert checked.exit_code == 0 and "59 documents" in checked.output
    assert sorted(os.listdir(tmp_path)) == [HOSTILE_NAME]  # nothing written beside the index
    assert sorted(os.listdir(index_dir.parent)) == [HOSTILE_NAME]


def test_a_percent_escape_in_the_path_is_not_decoded_and_never_drops_a_segment(source, tmp_path):
    built = tmp_path / "idx"
    assert run("ingest", str(source), "--index", str(built)).exit_code == 0
    moved = tmp_path / "mv%41"  # unescaped, SQLite read this as mvA
    shutil.copytree(built, moved)
    checked = run("index", "check", str(moved))
    assert checked.exit_code == 0 and "60 documents" in checked.output, checked.output
    result = run("index", "optimize", str(moved), "--drop-damaged")
    assert result.exit_code == 0 and "dropped" not in result.output and "60 documents" in result.output, result.output


def test_a_question_mark_in_the_index_never_opens_or_creates_another_file(source, tmp_path):
    import sqlite3

    built = tmp_path / "q?x"
    assert run("ingest", str(source), "--index", str(built)).exit_code == 0
    decoy = tmp_path / "q"  # what an unescaped "file:q?x/..." URI named: a database placed there must stay unread
    db = sqlite3.connect(decoy)
    db.execute("CREATE TABLE docs (pos INTEGER PRIMARY KEY, id TEXT, text TEXT, metadata TEXT)")
    db.commit()
    db.close()
    before = decoy.read_bytes()
    result = run("query", QUERY, "--index", str(built), "--mode", "bm25", "--json")
    assert result.exit_code == 0 and json.loads(result.output)["hits"][0]["text"] == QUERY
    assert decoy.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["q", "q?x"]
    decoy.unlink()
    assert run("query", QUERY, "--index", str(built), "--mode", "bm25").exit_code == 0
    assert sorted(os.listdir(tmp_path)) == ["q?x"]  # a read-only query creates nothing


@pytest.mark.parametrize("size", ["-7", "0"])
def test_a_bad_batch_size_is_refused_before_an_index_is_created(size, source, tmp_path):
    result = run("ingest", str(source), "--index", str(tmp_path / "idx"), "--batch-size", size)
    assert result.exit_code == 2 and "--batch-size" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "idx").exists()


def test_the_library_refuses_a_bad_batch_size_too(tmp_path, committed_encoder, question_bank):
    from hybrid_qpr.errors import ConfigError

    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    for size in (-7, 0):
        with pytest.raises(ConfigError, match="batch_size"):
            idx.ingest(question_bank[:5], committed_encoder, batch_size=size, show_progress=False)
    assert idx.count() == 0 and not idx.segments


def test_a_huge_ef_search_is_bounded_by_the_vectors(tmp_path, committed_encoder, question_bank):
    """efSearch 1e9 (before: 32 s and 8 GB on a 30k index) searches with efSearch = the graph's
    vectors, on a per-segment HNSW graph and on the vector base, from the library and the CLI."""
    from hybrid_qpr.backends.local.vectors import SearchSettings

    idx = LocalIndex.create(tmp_path / "hnsw", committed_encoder, faiss="hnsw")
    idx.ingest(question_bank[:80], committed_encoder, show_progress=False)
    base = LocalIndex.create(tmp_path / "base", committed_encoder, faiss="auto", flat_threshold=10)
    base.ingest(question_bank[:80], committed_encoder, show_progress=False)
    assert base.base is not None  # the 80 documents went into the vector base
    vector = committed_encoder.encode([QUERY], show_progress=False)[0]
    for index in (idx, base):
        expected = [h.id for h in index.knn(vector, 10)]
        index.set_search_settings(ef_search=10**9)
        started = time.perf_counter()
        assert [h.id for h in index.knn(vector, 10)] == expected
        assert time.perf_counter() - started < 5
    assert idx.segments[0].ef_search == 80 and idx.segments[0].faiss.hnsw.efSearch == 80
    assert base.base.ef_search == 80
    assert SearchSettings(ef_search=10**9).ef_for(None, 80) == 80 and SearchSettings().ef_for(None, 0) == 1
    for path in (tmp_path / "hnsw", tmp_path / "base"):
        result = run("query", QUERY, "--index", str(path), "--mode", "knn", "--ef-search", "1000000000", "-k",
                     "1000000000", "--json")
        assert result.exit_code == 0 and len(json.loads(result.output)["hits"]) == 80


def test_a_non_utf8_ids_file_is_one_line_and_deletes_nothing(source, tmp_path):
    index_dir = tmp_path / "idx"
    run("ingest", str(source), "--index", str(index_dir))
    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"q000\n\xff\xfe latin-1 junk\n")
    line = one_error_line(run("delete", "--ids-file", str(ids), "--index", str(index_dir)))
    assert f"{ids}:2: not valid UTF-8" in line and "nothing was deleted" in line
    assert LocalIndex.open(index_dir).count() == 60


@pytest.mark.parametrize("command", ["ingest", "query", "check", "optimize", "repair", "delete"])
def test_an_index_name_over_255_bytes_is_one_line(command, source, tmp_path):
    long = str(tmp_path / ("x" * 300))
    args = {"ingest": ["ingest", str(source), "--index", long], "query": ["query", QUERY, "--index", long],
            "check": ["index", "check", long], "optimize": ["index", "optimize", long],
            "repair": ["index", "repair", long], "delete": ["delete", "q000", "--index", long]}[command]
    result = run(*args)
    lines = [line for line in result.output.strip().splitlines() if line.startswith("Error:")]
    assert result.exit_code in (1, 2) and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "longer than the file system allows" in lines[0] or "does not exist" in lines[0], lines[0]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_queries_file_says_so(content, source, tmp_path):
    index_dir = tmp_path / "idx"
    run("ingest", str(source), "--index", str(index_dir))
    queries = tmp_path / "empty.jsonl"
    queries.write_text(content, encoding="utf-8")
    line = one_error_line(run("query", "--queries", str(queries), "--index", str(index_dir)))
    assert "holds no queries" in line and str(queries) in line
