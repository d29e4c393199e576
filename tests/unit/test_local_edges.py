"""Edges of the local index: damage only a later read or a merge meets, bounded
queries, a full disk, permissions and read-only directories, input files with nothing
usable, a model whose config lies, a model directory that is gone, padded ids, an index whose
documents were all deleted. Each ends in one line (never a traceback) and leaves the index
exactly as it was or exactly as committed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.testing.limits import file_size_limit, unprivileged
from hybrid_qpr.testing.cli import one_error_line, run
from hybrid_qpr.errors import IndexDamagedError, IndexStorageError
from hybrid_qpr.types import Document, QueryVector



def live_state(index_dir: Path) -> dict[str, str]:
    idx = LocalIndex.open(index_dir)
    try:
        return {d.id: d.text for d in idx.documents([i for s in idx.segments for i in s.ids_at(
            np.flatnonzero(~s.deleted) if s.deleted is not None else np.arange(s.count))]).values()}
    finally:
        idx.close()


@pytest.fixture()
def small_index(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    idx.close()
    return tmp_path / "idx"


# ---------------------------------------------------------------------- damage met later
def test_an_edited_vector_row_stops_rerank_and_optimize_re_encodes_it(small_index, committed_encoder, question_bank):
    seg = next((small_index / "segments").iterdir())
    vectors = np.load(seg / "vectors.npy")
    vectors[7] = vectors[8]  # same size: only the CRC32 knows
    np.save(seg / "vectors.npy", vectors)
    line = one_error_line(run("query", "how do i change my password?", "--index", str(small_index), "--mode", "rerank"))
    assert "vectors.npy has changed since it was written" in line and "index optimize" in line
    ok = run("query", "how do i change my password?", "--index", str(small_index), "--mode", "bm25", "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["hits"]  # BM25 never reads the vectors
    assert run("index", "optimize", str(small_index)).exit_code == 0
    assert run("index", "check", str(small_index)).exit_code == 0
    assert live_state(small_index) == {d.id: d.text for d in question_bank}
    reranked = run("query", question_bank[7].text, "--index", str(small_index), "--mode", "rerank", "--json", "-k", "1")
    assert json.loads(reranked.output)["hits"][0]["id"] == question_bank[7].id


def test_a_merge_refuses_damaged_input_and_says_the_ingest_was_committed(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    for start in range(0, 100, 10):  # ten segments: the eleventh makes the merge policy merge
        idx.ingest(question_bank[start:start + 10], committed_encoder, show_progress=False)
    assert len(idx.segments) == 10
    first = idx.path / "segments" / idx.manifest["segments"][0]["name"]
    vectors = np.load(first / "vectors.npy")
    vectors[0] += 1.0
    np.save(first / "vectors.npy", vectors)
    with pytest.raises(IndexDamagedError) as caught:
        LocalIndex.open(idx.path).ingest(question_bank[100:110], committed_encoder, show_progress=False)
    message = str(caught.value)
    assert "\n" not in message and "was committed" in message and "merging segments afterwards stopped" in message
    assert "vectors.npy" in message
    assert set(live_state(idx.path)) == {d.id for d in question_bank[:110]}  # the ingest is there
    assert run("index", "optimize", str(idx.path)).exit_code == 0  # re-encodes with the index's model
    assert run("index", "check", str(idx.path)).exit_code == 0


# ---------------------------------------------------------------------- bounds
def test_a_huge_k_or_offset_is_clamped_to_the_index(small_index, committed_encoder, question_bank):
    idx = LocalIndex.open(small_index)
    vector = committed_encoder.encode([question_bank[3].text])[0]
    assert len(idx.knn(vector, 1_000_000_000)) == len(question_bank)
    assert len(idx.bm25("password", 1_000_000_000)) == 10  # only the documents that match
    bm25_list, knn_list = idx.bm25_and_knn("password", QueryVector.of(vector), 1_000_000_000)
    assert len(knn_list.ids) == len(question_bank) and len(bm25_list.ids) == 10
    for mode in ("hybrid", "knn", "bm25", "rerank"):
        out = run("query", "how do i change my password?", "--index", str(small_index), "--mode", mode, "--json",
                  "-k", "1000000000")
        assert out.exit_code == 0 and 1 <= len(json.loads(out.output)["hits"]) <= len(question_bank), mode
        far = run("query", "password", "--index", str(small_index), "--mode", mode, "--json", "--from", "1000000000")
        assert far.exit_code == 0 and json.loads(far.output)["hits"] == [], mode


# ---------------------------------------------------------------------- a full disk
def sizes(index_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (index_dir / "segments").rglob("*") if p.is_file()}


@pytest.mark.parametrize("stage", ["vectors.npy", "vectors.faiss"])
def test_a_full_disk_while_writing_a_segment_commits_nothing(stage, tmp_path, committed_encoder, question_bank):
    # HNSW: its graph file is larger than vectors.npy, so a limit between the two stops FAISS
    reference = LocalIndex.create(tmp_path / "reference", committed_encoder, faiss="hnsw")
    reference.ingest(question_bank[:150], committed_encoder, show_progress=False)
    size = sizes(reference.path)
    assert size["docs.sqlite"] < size["vectors.npy"] < size["vectors.faiss"]
    limit = (size["docs.sqlite"] + size["vectors.npy"]) // 2 if stage == "vectors.npy" else \
        (size["vectors.npy"] + size["vectors.faiss"]) // 2
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder, faiss="hnsw")
    idx.ingest(question_bank[150:], committed_encoder, show_progress=False)
    before = live_state(idx.path)
    with file_size_limit(limit), pytest.raises(IndexStorageError) as caught:
        idx.ingest(question_bank[:150], committed_encoder, show_progress=False)
    message = str(caught.value)
    assert "\n" not in message and stage in message and "file-size limit" in message, message
    assert "this ingest was not committed" in message and "still holds its previous commit (50 documents)" in message
    assert "needs at least" in message and "MB" in message and "Fix:" in message
    assert live_state(idx.path) == before
    assert run("index", "check", str(idx.path)).exit_code == 0
    assert idx.ingest(question_bank[:150], committed_encoder, show_progress=False).indexed == 150  # then it goes through


def test_a_full_disk_at_the_commit_and_in_the_merge_after_it(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    for start in range(0, 100, 10):
        idx.ingest(question_bank[start:start + 10], committed_encoder, show_progress=False)
    manifest_size = (idx.path / "manifest.json").stat().st_size
    with file_size_limit(manifest_size // 2), pytest.raises(IndexStorageError) as caught:  # tombstones fit, the manifest not
        idx.delete(["q000", "q001"])
    assert "deleting 2 documents was not committed" in str(caught.value) and "manifest.json" in str(caught.value)
    assert len(live_state(idx.path)) == 100
    # the eleventh small segment fits, the merged one does not: the ingest is committed, the merge is not
    largest_small = max(sizes(idx.path).values())
    with file_size_limit(largest_small * 3), pytest.raises(IndexStorageError) as caught:
        LocalIndex.open(idx.path).ingest(question_bank[100:110], committed_encoder, show_progress=False)
    message = str(caught.value)
    assert "\n" not in message and "this ingest (indexed 10, updated 0) was committed" in message
    assert "merging segments afterwards stopped" in message and "file-size limit" in message
    assert len(live_state(idx.path)) == 110
    result = run("ingest", str(_jsonl(tmp_path / "more.jsonl", question_bank[110:120])), "--index", str(idx.path))
    assert result.exit_code == 0  # with room again, the next write merges


def _jsonl(path: Path, docs) -> Path:
    path.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
    return path


# ---------------------------------------------------------------------- permissions, read-only
def public_tmp() -> str:
    """A temporary directory whose every ancestor anyone may enter (pytest's tmp_path, and a
    CI's $TMPDIR, may be private to their owner, which would refuse uid nobody for the wrong reason)."""
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        path = Path(candidate).resolve()
        if path.is_dir() and os.access(path, os.W_OK) and all(p.stat().st_mode & 0o001 for p in [path, *path.parents]):
            return str(path)
    raise AssertionError("no temporary directory that every user may enter")


@pytest.fixture()
def open_index(committed_encoder, question_bank):
    """An index in a directory everyone may enter (see ``public_tmp``)."""
    base = Path(tempfile.mkdtemp(prefix="hqpr-perm-", dir=public_tmp()))
    os.chmod(base, 0o755)
    idx = LocalIndex.create(base / "idx", committed_encoder)
    idx.ingest(question_bank[:40], committed_encoder, show_progress=False)
    idx.close()
    run("query", "password", "--index", str(base / "idx"), "--mode", "bm25")  # imports done while privileged
    yield base / "idx"
    for path in [base, *base.rglob("*")]:
        with contextlib.suppress(OSError):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    shutil.rmtree(base)


def _read_only(index_dir: Path) -> None:
    for path in [index_dir, *index_dir.rglob("*")]:
        os.chmod(path, 0o555 if path.is_dir() else 0o444)


def test_an_index_that_may_not_be_written_refuses_writes_in_one_line(open_index, committed_encoder, tmp_path):
    (open_index / "write.lock").write_text("4242\n")  # a stale pid from a writer long gone
    _read_only(open_index)
    source = _jsonl(Path(tempfile.mkdtemp(dir=public_tmp())) / "more.jsonl", [Document("new", "a new question?")])
    os.chmod(source.parent, 0o755)
    os.chmod(source, 0o644)
    with unprivileged():
        for args in (["ingest", str(source), "--index", str(open_index)],
                     ["delete", "q001", "--index", str(open_index)],
                     ["index", "optimize", str(open_index)]):
            line = one_error_line(run(*args))
            assert "permission denied writing" in line and "write.lock" in line and "Fix:" in line, (args, line)
        checked = run("index", "check", str(open_index))
        assert checked.exit_code == 0 and "being written" not in checked.output, checked.output  # the stale pid is no writer
        found = run("query", "password", "--index", str(open_index), "--mode", "bm25", "--json")
        assert found.exit_code == 0 and json.loads(found.output)["hits"]  # reading a read-only index works
    shutil.rmtree(source.parent)


def test_an_unreadable_file_is_a_permission_problem_not_damage(open_index):
    seg = next((open_index / "segments").iterdir())
    os.chmod(seg / "docs.sqlite", 0o000)
    with unprivileged():
        line = one_error_line(run("query", "password", "--index", str(open_index), "--mode", "bm25"))
        assert "permission denied reading" in line and "docs.sqlite" in line and "--drop-damaged" not in line, line
        checked = run("index", "check", str(open_index))
        assert checked.exit_code == 1 and "permission denied reading" in checked.output
        assert "--drop-damaged" not in checked.output and "damaged" not in checked.output
        line = one_error_line(run("index", "optimize", str(open_index), "--drop-damaged"))
        assert "permission denied" in line
    os.chmod(seg / "docs.sqlite", 0o644)
    assert run("index", "check", str(open_index)).exit_code == 0  # nothing was dropped


# ---------------------------------------------------------------------- input files, models, ids
@pytest.mark.parametrize("content, expected", [
    ('[{"id": "a", "text": "first question?"}, {"id": "b", "text": "second?"}]\n', "this is a JSON array, not JSONL"),
    ('[\n  {"id": "a", "text": "first question?"},\n  {"id": "b", "text": "second?"}\n]\n',
     "this is a JSON array, not JSONL"),
    ("id,text\na,first question?\nb,second question?\n", "this is a CSV header ('id,text'), not JSONL; read the "
                                                        "file as a table with --format table"),
    ("first question?\nsecond question?\n", "no document could be read (all 2 lines were skipped"),
    ("", "no document could be read (it holds no lines"),
])
def test_an_input_with_no_usable_line_fails_and_creates_nothing(content, expected, tmp_path, committed_encoder):
    source = tmp_path / "docs.jsonl"
    source.write_text(content, encoding="utf-8")
    line = one_error_line(run("ingest", str(source), "--index", str(tmp_path / "idx"),
                              "--model", str(committed_encoder.model_dir)))
    assert expected in line and "docs.jsonl" in line, line
    assert not (tmp_path / "idx").exists()


def test_a_model_whose_config_lies_about_its_dims_creates_nothing(tmp_path, committed_encoder):
    model = tmp_path / "model"
    shutil.copytree(committed_encoder.model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["dim"] = committed_encoder.dim // 2
    (model / "config.json").write_text(json.dumps(config))
    source = _jsonl(tmp_path / "docs.jsonl", [Document("a", "first question?")])
    line = one_error_line(run("ingest", str(source), "--index", str(tmp_path / "idx"), "--model", str(model)))
    assert f"says dim {committed_encoder.dim // 2} but it outputs vectors of {committed_encoder.dim} dims" in line
    assert not (tmp_path / "idx").exists()


def test_bm25_needs_no_model_and_a_gone_model_is_named_as_gone(tmp_path, committed_encoder):
    from hybrid_qpr.resources import model_dir

    other = next(p for p in Path(model_dir()).parent.iterdir()
                 if (p / "config.json").is_file() and p.resolve() != Path(committed_encoder.model_dir).resolve()
                 and json.loads((p / "config.json").read_text()).get("kind") == "cnn")
    model = tmp_path / "model"
    shutil.copytree(other, model)
    source = _jsonl(tmp_path / "docs.jsonl", [Document("a", "how do i reset my password?"), Document("b", "cheap flights?")])
    assert run("ingest", str(source), "--index", str(tmp_path / "idx"), "--model", str(model)).exit_code == 0
    shutil.rmtree(model)
    found = run("query", "password", "--index", str(tmp_path / "idx"), "--mode", "bm25", "--json")
    assert found.exit_code == 0 and [h["id"] for h in json.loads(found.output)["hits"]] == ["a"]
    line = one_error_line(run("query", "password", "--index", str(tmp_path / "idx")))
    assert "is gone" in line and "--mode bm25" in line and f"pass --model {model}" not in line, line


def test_padded_ids_are_refused_and_ids_are_kept_exactly(tmp_path, committed_encoder):
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "padded", "text": "the first question?"}\n{"id": "  padded  ", "text": "another one?"}\n'
                      '{"id": "Case", "text": "a third question?"}\n', encoding="utf-8")
    result = run("ingest", str(source), "--index", str(tmp_path / "idx"), "--model", str(committed_encoder.model_dir))
    assert result.exit_code == 0 and "indexed 2, updated 0, skipped 1" in result.output
    assert "'  padded  ' has leading or trailing whitespace" in result.output
    assert live_state(tmp_path / "idx") == {"padded": "the first question?", "Case": "a third question?"}
    report = LocalIndex.open(tmp_path / "idx").ingest([Document(" x", "a question?")], committed_encoder,
                                                      show_progress=False)
    assert report.indexed == 0 and "leading or trailing whitespace" in report.skipped[0].reason


def test_an_index_whose_documents_were_all_deleted_says_so(small_index, question_bank):
    assert run("delete", *[d.id for d in question_bank], "--index", str(small_index)).exit_code == 0
    line = one_error_line(run("query", "password", "--index", str(small_index)))
    assert "every document in it was deleted" in line and "interrupted" not in line, line


def test_a_full_disk_in_optimize_commits_nothing(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    for start in range(0, 40, 10):
        idx.ingest(question_bank[start:start + 10], committed_encoder, show_progress=False)
    before = live_state(idx.path)
    with file_size_limit(max(sizes(idx.path).values()) * 2), pytest.raises(IndexStorageError) as caught:
        idx.optimize()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("optimize was not committed: writing ")
    assert "still holds its previous commit (40 documents)" in message
    assert live_state(idx.path) == before and len(LocalIndex.open(idx.path).segments) == 4
    assert idx.count() == 40 and len(idx.bm25("password", 5)) > 0  # the same reader goes on
