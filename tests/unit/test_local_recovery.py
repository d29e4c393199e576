"""Recovery of a damaged local index: every file of a segment damaged in turn (a byte flipped at
several offsets, truncated, deleted) costs no document, because each part of a segment is kept
twice; what truly cannot be rebuilt is listed before anything is dropped, dropped only when
confirmed, and its files are moved to ``damaged/`` instead of being deleted. Also: ``index check``
sees a damaged manifest copy, ``index repair`` needs no lock for an intact index."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.check import check_index
from hybrid_qpr.backends.local.commit import write_manifest
from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import IndexDamagedError
from hybrid_qpr.types import Document

ORIGINAL = [Document(f"a{i:02d}", f"how do i reset setting number {i}?", {"n": i} if i % 2 else {})
            for i in range(12)]
UPDATES = [Document(d.id, d.text.replace("reset", "restore"), {"updated": True}) for d in ORIGINAL[:3]]
NEW = [Document(f"b{i:02d}", f"where is shop number {i}?", {"shop": i}) for i in range(3)]
DELETED = ("a05", "b01")


def documents(index_dir: Path) -> dict[str, tuple[str, dict]]:
    """id -> (text, metadata) of every live document, from a fresh open."""
    idx = LocalIndex.open(index_dir)
    try:
        ids = [row[0] for seg in idx.segments for row in seg.sql("SELECT id FROM docs")]
        found = idx.documents(ids)
        assert idx.count() == len(found) == idx.manifest["count"]
        return {doc_id: (doc.text, doc.metadata) for doc_id, doc in found.items()}
    finally:
        idx.close()


def expected(docs) -> dict[str, tuple[str, dict]]:
    return {d.id: (d.text, d.metadata) for d in docs}


EVERYTHING = {doc_id: doc for doc_id, doc in expected([*UPDATES, *ORIGINAL[3:], *NEW]).items() if doc_id not in DELETED}


@pytest.fixture(scope="module")
def built(tmp_path_factory, committed_encoder) -> Path:
    """Two segments: A (a00-a11; a00-a02 replaced by updates in B, a05 deleted) and B (the
    updates and b00-b02; b01 deleted): tombstones of both kinds, and updated documents whose
    older copies are tombstoned in the other segment."""
    idx = LocalIndex.create(tmp_path_factory.mktemp("built") / "idx", committed_encoder)
    idx.ingest(ORIGINAL, committed_encoder, show_progress=False)
    idx.ingest(UPDATES + NEW, committed_encoder, show_progress=False)
    idx.delete(list(DELETED))
    idx.set_fusion_defaults({})  # one more commit: the tombstone files the delete replaced are removed
    assert [(e["count"], e["deleted"]) for e in idx.manifest["segments"]] == [(12, 4), (6, 1)]
    idx.close()
    assert documents(idx.path) == EVERYTHING
    return idx.path


def copy_of(built: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    index_dir = tmp_path / "idx"
    shutil.copytree(built, index_dir)
    names = [e["name"] for e in json.loads((index_dir / "manifest.json").read_text())["segments"]]
    return index_dir, [index_dir / "segments" / name for name in names]


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def damages(path: Path):
    """(name, damage) for one file: a byte flipped at the start, in SQLite's header (bytes 9 and
    108), in the middle and at the end; truncated to half; deleted."""
    size = path.stat().st_size
    for offset in sorted({0, 9, 108, size // 2, size - 1}):
        if offset < size:
            yield f"byte {offset} flipped", lambda p, at=offset: flip(p, at)
    yield "truncated", lambda p: os.truncate(p, p.stat().st_size // 2)
    yield "deleted", lambda p: p.unlink()


SEGMENT_FILES = ["docs.sqlite", "docs.text", "docs.offsets.npy", "docs.ids.json", "vectors.npy", "vectors.faiss",
                 "bm25.vocab.json", "bm25.ptr.npy", "bm25.rows.npy", "bm25.tf.npy", "bm25.doclen.npy", "tombstones",
                 "tombstones copy"]


def segment_file(seg: Path, name: str) -> Path:
    if name.startswith("tombstones"):
        entry = next(e for e in json.loads((seg.parents[1] / "manifest.json").read_text())["segments"]
                     if e["name"] == seg.name)
        return seg / (entry["deletions"]["copy"]["file"] if name.endswith("copy") else entry["deletions"]["file"])
    return seg / name


def test_every_file_of_the_segments_is_listed(built):
    """The fault test below damages every file a segment has (none is forgotten)."""
    for seg in copy_of(built, built.parent / "listing")[1]:
        assert sorted(p.name for p in seg.iterdir()) == sorted(segment_file(seg, name).name for name in SEGMENT_FILES)
    shutil.rmtree(built.parent / "listing")


@pytest.mark.parametrize("file", SEGMENT_FILES)
@pytest.mark.parametrize("segment", [0, 1])
def test_one_damaged_file_costs_no_document(segment, file, built, tmp_path, committed_encoder):
    """Each damage of one file of either segment: 'index check' names the file, 'index
    optimize' (no --drop-damaged) rebuilds it from the other copy and drops nothing, and the
    index then holds every document with its text and metadata, deleted ones still deleted."""
    template, segments = copy_of(built, tmp_path / "template")
    target_name = segment_file(segments[segment], file).name
    for case, damage in damages(segment_file(segments[segment], file)):
        index_dir = tmp_path / "case"
        shutil.rmtree(index_dir, ignore_errors=True)
        shutil.copytree(template, index_dir)
        damage(index_dir / "segments" / segments[segment].name / target_name)
        report = check_index(index_dir)
        assert not report.ok and any(target_name in p.what for p in report.problems), (case, report.problems)
        result = LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder)
        assert result["dropped"] == [], (case, result)
        assert check_index(index_dir).ok, (case, check_index(index_dir).problems)
        assert documents(index_dir) == EVERYTHING, case


def _unrecoverable(index_dir: Path, seg: Path, *files: str) -> None:
    for file in files:
        flip(seg / file, 0)


def test_what_cannot_be_rebuilt_is_listed_asked_and_set_aside(built, tmp_path):
    """Segment B's docs.sqlite and text store both damaged (its ids file intact): its texts
    are gone, its ids are known. 'optimize' names the lost ids; '--drop-damaged' lists them
    before asking, a 'no' changes nothing, a 'yes' moves B's files to damaged/ and gives the
    updated documents their older version back from A (tombstoned there by the update)."""
    index_dir, (_, seg_b) = copy_of(built, tmp_path)
    _unrecoverable(index_dir, seg_b, "docs.sqlite", "docs.text")
    before = {p.relative_to(index_dir): p.read_bytes() for p in index_dir.rglob("*") if p.is_file()}
    runner = CliRunner()
    refused = runner.invoke(cli, ["index", "optimize", str(index_dir)], catch_exceptions=False)
    assert refused.exit_code == 1 and "--drop-damaged" in refused.output, refused.output
    assert '"b00", "b02"' in refused.output and '"a00", "a01", "a02"' in refused.output, refused.output
    asked = runner.invoke(cli, ["index", "optimize", str(index_dir), "--drop-damaged"], input="n\n",
                          catch_exceptions=False)
    listing, question = asked.output.index('"b00", "b02"'), asked.output.index("Drop it? [y/N]")
    assert asked.exit_code == 1 and listing < question and "nothing dropped" in asked.output, asked.output
    assert "older version back" in asked.output and "damaged" in asked.output
    after = {p.relative_to(index_dir): p.read_bytes() for p in index_dir.rglob("*") if p.is_file()}
    assert after.keys() - {Path("write.lock")} == before.keys() - {Path("write.lock")}
    assert all(after[p] == before[p] for p in before if p.name != "write.lock")  # declined: nothing changed
    dropped = runner.invoke(cli, ["index", "optimize", str(index_dir), "--drop-damaged", "--yes"],
                            catch_exceptions=False)
    assert dropped.exit_code == 0 and '"b00", "b02"' in dropped.output, dropped.output
    assert f"dropped damaged segment {seg_b.name} (2 documents lost, 3 back in their older version" in dropped.output
    aside = index_dir / "damaged" / seg_b.name
    assert sorted(p.name for p in aside.iterdir()) == sorted([p.name for p in before_files(before, seg_b)] + ["lost.json"])
    lost = json.loads((aside / "lost.json").read_text())
    assert lost["ids"] == ["a00", "a01", "a02", "b00", "b02"] and sorted(lost["restored_older_version"]) == \
        ["a00", "a01", "a02"]
    assert documents(index_dir) == expected(d for d in ORIGINAL if d.id != "a05")
    assert check_index(index_dir).ok
    assert (aside / "docs.ids.json").read_bytes() == before[Path("segments") / seg_b.name / "docs.ids.json"]


def before_files(before: dict[Path, bytes], seg: Path) -> list[Path]:
    return [p for p in before if p.parent == Path("segments") / seg.name]


def test_unreadable_ids_are_counted_and_nothing_else_is_lost(built, tmp_path, committed_encoder):
    """docs.sqlite and the ids file of A both damaged: its texts survive but no id verifies.
    The loss says how many documents it costs; with the drop confirmed, B keeps every document."""
    index_dir, (seg_a, _) = copy_of(built, tmp_path)
    _unrecoverable(index_dir, seg_a, "docs.sqlite", "docs.ids.json")
    with pytest.raises(IndexDamagedError, match="its 8 live documents would be lost .their ids cannot be read"):
        LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder)
    shown = []
    result = LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder, drop_damaged=True,
                                                            confirm=lambda losses: shown.extend(losses) or True)
    assert [loss.segment for loss in shown] == [seg_a.name] and result["dropped"] == shown
    assert documents(index_dir) == expected([*UPDATES, NEW[0], NEW[2]])


def test_an_index_written_before_the_second_copies_keeps_working_and_gets_them(built, tmp_path, committed_encoder):
    """Segments without the ids file and tombstone copies (as an earlier version wrote them):
    queries, check and optimize work; a damaged docs.sqlite whose ids cannot be verified is a
    listed loss (by count: its ids have no other copy), and dropping it leaves the updated
    documents tombstoned in A as they are (nothing says which of A's tombstones were updates);
    optimize of the healthy index writes the second copies."""
    index_dir, segments = copy_of(built, tmp_path)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    for entry, seg in zip(manifest["segments"], segments):
        del entry["files"]["docs.ids.json"]
        (seg / "docs.ids.json").unlink()
        (seg / entry["deletions"].pop("copy")["file"]).unlink()
    manifest.pop("manifest_crc32")
    write_manifest(index_dir, manifest)
    assert check_index(index_dir).ok and documents(index_dir) == EVERYTHING
    old = tmp_path / "old"
    shutil.copytree(index_dir, old)
    flip(segments[1] / "docs.sqlite", 9)  # SQLite's header: unreadable, and no other copy of the ids
    with pytest.raises(IndexDamagedError, match="ids cannot be read back and verified.*its 5 live documents"):
        LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder)
    result = LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder, drop_damaged=True)
    assert [loss.segment for loss in result["dropped"]] == [segments[1].name]
    assert documents(index_dir) == expected(d for d in ORIGINAL[3:] if d.id != "a05")
    LocalIndex.open_for_repair(old).optimize(encoder=committed_encoder)
    entry = json.loads((old / "manifest.json").read_text())["segments"][0]
    assert "docs.ids.json" in entry["files"] and check_index(old).ok and documents(old) == EVERYTHING


def test_a_single_old_segment_gets_its_ids_file_without_a_rebuild(tmp_path, committed_encoder):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(ORIGINAL, committed_encoder, show_progress=False)
    manifest = dict(idx.manifest)
    name = manifest["segments"][0]["name"]
    del manifest["segments"][0]["files"]["docs.ids.json"]
    (idx.path / "segments" / name / "docs.ids.json").unlink()
    manifest.pop("manifest_crc32")
    write_manifest(idx.path, manifest)
    idx.close()
    LocalIndex.open_for_repair(idx.path).optimize()
    entry = json.loads((idx.path / "manifest.json").read_text())["segments"][0]
    assert entry["name"] == name and "docs.ids.json" in entry["files"]  # the same segment, the copy added
    assert check_index(idx.path).ok and documents(idx.path) == expected(ORIGINAL)


@pytest.mark.parametrize("damage", ["flipped", "not json", "missing", "stale"])
def test_check_sees_a_damaged_manifest_copy_and_repair_rewrites_it(damage, built, tmp_path):
    index_dir, _ = copy_of(built, tmp_path)
    copy = index_dir / "manifest.copy.json"
    if damage == "flipped":  # still JSON: one digit of a checksum
        text = copy.read_text()
        at = text.index('"crc32": ') + len('"crc32": ')
        copy.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
    elif damage == "not json":
        flip(copy, 0)
    elif damage == "missing":
        copy.unlink()
    else:  # a commit interrupted between the manifest and its copy
        stale = json.loads(copy.read_text())
        stale["generation"] -= 1
        stale.pop("manifest_crc32")
        from hybrid_qpr.backends.local.commit import manifest_checksum
        copy.write_text(json.dumps({**stale, "manifest_crc32": manifest_checksum(stale)}))
    runner = CliRunner()
    checked = runner.invoke(cli, ["index", "check", str(index_dir)], catch_exceptions=False)
    assert "manifest.copy.json" in checked.output and "index repair" in checked.output, checked.output
    assert checked.exit_code == (0 if damage == "stale" else 1), checked.output  # stale: a note, not damage
    repaired = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
    assert repaired.exit_code == 0 and "manifest.copy.json rewritten from the intact" in repaired.output, \
        repaired.output
    assert copy.read_text() == (index_dir / "manifest.json").read_text()
    checked = runner.invoke(cli, ["index", "check", str(index_dir)], catch_exceptions=False)
    assert checked.exit_code == 0 and "manifest.copy.json" not in checked.output, checked.output


def test_repair_of_an_intact_index_takes_no_lock(built, tmp_path):
    """'index repair' on an intact index answers 'nothing to repair' without the write lock:
    while another process holds it, and with no lock file created (on a read-only file system
    it could not be)."""
    index_dir, _ = copy_of(built, tmp_path)
    (index_dir / "write.lock").unlink(missing_ok=True)
    runner = CliRunner()
    result = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
    assert result.exit_code == 0 and "nothing to repair" in result.output and not (index_dir / "write.lock").exists()
    fd = os.open(index_dir / "write.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a writer at work
        result = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
        assert result.exit_code == 0 and "nothing to repair" in result.output, result.output
    finally:
        os.close(fd)
    if os.geteuid() != 0:  # root writes through read-only permissions
        (index_dir / "write.lock").unlink()
        index_dir.chmod(0o555)
        try:
            result = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
            assert result.exit_code == 0 and "nothing to repair" in result.output, result.output
        finally:
            index_dir.chmod(0o755)


def test_ids_a_damaged_docs_sqlite_still_returns_are_listed_as_unverified(built, tmp_path, committed_encoder):
    """B's text store and ids file damaged, and an id edited inside its docs.sqlite (which SQLite
    still reads): the loss lists the ids SQLite returns, says they are unverified, and brings
    no older version back on their word (a wrong id could bring a deleted document back)."""
    index_dir, (_, seg_b) = copy_of(built, tmp_path)
    _unrecoverable(index_dir, seg_b, "docs.text", "docs.ids.json")
    db = seg_b / "docs.sqlite"
    db.write_bytes(db.read_bytes().replace(b"b00", b"b0Z"))
    with pytest.raises(IndexDamagedError) as refused:
        LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder)
    message = str(refused.value)
    assert '5 documents would be lost: "a00", "a01", "a02", "b0Z", "b02" (the ids as far as' in message, message
    assert "unverified" in message and "older version" not in message
    result = LocalIndex.open_for_repair(index_dir).optimize(encoder=committed_encoder, drop_damaged=True)
    assert [loss.restored for loss in result["dropped"]] == [{}]
    assert documents(index_dir) == expected(d for d in ORIGINAL[3:] if d.id != "a05")


def test_a_linked_damaged_folder_is_refused_and_nothing_outside_is_written(built, tmp_path):
    """A damaged/ that is a link out of the index: the drop is refused in one line, nothing is
    written through the link and nothing is dropped."""
    index_dir, (_, seg_b) = copy_of(built, tmp_path)
    _unrecoverable(index_dir, seg_b, "docs.sqlite", "docs.text")
    outside = tmp_path / "outside"
    outside.mkdir()
    (index_dir / "damaged").symlink_to(outside)
    result = CliRunner().invoke(cli, ["index", "optimize", str(index_dir), "--drop-damaged", "--yes"],
                                catch_exceptions=False)
    assert result.exit_code == 1 and "link" in result.output and "Traceback" not in result.output, result.output
    assert list(outside.iterdir()) == [] and seg_b.is_dir() and not check_index(index_dir).ok
