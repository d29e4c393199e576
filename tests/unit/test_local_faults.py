"""Faults of the local index: two writers at once, writers killed (SIGKILL) at random points,
and every kind of damaged file. Each test checks the final state exactly: the index holds
exactly the input ids with the input texts, nothing duplicated, nothing left behind."""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.local import LOCK_FILE, LocalIndex
from hybrid_qpr.cli.main import cli
from hybrid_qpr.types import Document

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def state(index_dir: Path) -> dict[str, str]:
    """id -> text of every live document, read from a fresh open (which also cleans up)."""
    idx = LocalIndex.open(index_dir)
    out: dict[str, str] = {}
    for seg in idx.segments:
        for pos, (doc_id, text) in enumerate(seg.sql("SELECT id, text FROM docs ORDER BY pos")):
            if seg.deleted is None or not seg.deleted[pos]:
                assert doc_id not in out, f"{doc_id} is live twice"
                out[doc_id] = text
    assert idx.count() == len(out) == idx.manifest["count"]
    return out


def assert_no_leftovers(index_dir: Path) -> None:
    manifest = json.loads((index_dir / "manifest.json").read_text())
    keep = {f"segments/{e['name']}" for e in manifest["segments"]} | {p.split("/deleted.")[0] for p in manifest["retained"]}
    segments = index_dir / "segments"
    assert not segments.exists() or {f"segments/{p.name}" for p in segments.iterdir()} <= keep
    assert not [p for p in index_dir.rglob(".*") if p.name != LOCK_FILE]  # no temporary files or directories


def write_jsonl(path: Path, docs: list[Document]) -> Path:
    path.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
    return path


def cli_ingest(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hybrid_qpr.cli.main", "ingest", *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def lock_is_held(index_dir: Path) -> bool:
    fd = os.open(index_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def waits_for_lock(index_dir: Path, pid: int) -> bool:
    """Whether process ``pid`` is blocked waiting for the index's write lock (Linux lists a
    blocked flock request in /proc/locks as '-> FLOCK ... pid major:minor:inode')."""
    inode = os.stat(index_dir / LOCK_FILE).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5] == str(pid) \
                and fields[6].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


def test_two_concurrent_writers_one_refused_one_waits(tmp_path, committed_encoder, question_bank):
    index_dir = tmp_path / "idx"
    LocalIndex.create(index_dir, committed_encoder).ingest(question_bank[:50], committed_encoder, show_progress=False)
    first = cli_ingest("-", "--index", str(index_dir), "--format", "jsonl", stdin=subprocess.PIPE)
    first.stdin.write("".join(json.dumps({"id": d.id, "text": d.text + " (first)"}) + "\n" for d in question_bank[:100]))
    first.stdin.flush()  # stdin stays open: the first writer holds the lock while it reads
    deadline = time.monotonic() + 60
    while not lock_is_held(index_dir):
        assert first.poll() is None and time.monotonic() < deadline, first.stdout.read() if first.poll() is not None else ""
        time.sleep(0.05)
    second_docs = [Document(d.id, d.text + " (second)") for d in question_bank[80:200]]
    refused = cli_ingest(write_jsonl(tmp_path / "b.jsonl", second_docs).as_posix(), "--index", str(index_dir))
    out, _ = refused.communicate(timeout=120)
    assert refused.returncode == 1 and f"is being written by pid {first.pid}" in out and "--wait" in out, out
    assert "Traceback" not in out
    waiting = cli_ingest(str(tmp_path / "b.jsonl"), "--index", str(index_dir), "--wait")
    while not waits_for_lock(index_dir, waiting.pid):  # queued behind the first writer, as the kernel shows
        assert waiting.poll() is None and time.monotonic() < deadline + 60, waiting.communicate()
        time.sleep(0.05)
    assert first.poll() is None  # the first writer still holds the lock
    first.stdin.close()
    assert first.wait(timeout=120) == 0
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and "indexed 100, updated 20" in out, out
    expected = {d.id: d.text + " (first)" for d in question_bank[:100]} | {d.id: d.text for d in second_docs}
    assert state(index_dir) == expected
    assert_no_leftovers(index_dir)


WRITER = """
import json, sys
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.types import Document
idx = LocalIndex.open(sys.argv[1])
encoder = Encoder.load(idx.model_dir)
docs = [Document(**json.loads(line)) for line in open(sys.argv[2], encoding="utf-8")]
print("start", flush=True)
idx.ingest(docs, encoder, show_progress=False, segment_docs=int(sys.argv[3]))
print("done", flush=True)
"""


def test_writer_killed_at_random_points_leaves_a_whole_commit(tmp_path, committed_encoder, question_bank):
    """Each round ingests updates and new ids in several segments (and so triggers merges),
    and is SIGKILLed at a random instant of its run (the first round, not killed, measures
    how long a run takes): the index then holds exactly the previous commit or the new one,
    and reopening leaves no trace of the dead writer."""
    index_dir = tmp_path / "idx"
    LocalIndex.create(index_dir, committed_encoder)
    rng = random.Random(12)
    current: dict[str, str] = {}
    outcomes = []
    full_run = None  # seconds from "start" to "done" of an ingest nobody kills (round 0)
    for round_ in range(6):
        docs = [Document(d.id, f"{d.text} v{round_}") for d in question_bank[round_ * 20:round_ * 20 + 80]]
        path = write_jsonl(tmp_path / f"round{round_}.jsonl", docs)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(index_dir), str(path), "8"], env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "start", writer.stderr.read()
        started = time.monotonic()
        if full_run is None:
            assert writer.stdout.readline().strip() == "done", writer.stderr.read()
            full_run = time.monotonic() - started
        else:  # a random instant of the run: reading, encoding, writing segments, committing, merging, or after
            time.sleep(rng.uniform(0.0, 1.2 * full_run))
            writer.send_signal(signal.SIGKILL)
        writer.wait()
        after = state(index_dir)
        new = current | {d.id: d.text for d in docs}
        assert after in (current, new), f"round {round_}: neither the previous nor the new commit"
        outcomes.append("new" if after == new else "previous")
        assert_no_leftovers(index_dir)
        current = after
    assert json.loads((index_dir / "manifest.json").read_text())["count"] == len(current)
    print("kill outcomes:", outcomes)


def test_interrupted_first_ingest_says_so_on_every_query(tmp_path, committed_encoder):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "fine question?"}\nnot json\n', encoding="utf-8")
    index_dir = tmp_path / "idx"
    runner = CliRunner()
    failed = runner.invoke(cli, ["ingest", str(bad), "--index", str(index_dir), "--strict",
                                 "--model", str(committed_encoder.model_dir)])
    assert failed.exit_code == 1
    result = runner.invoke(cli, ["query", "fine question", "--index", str(index_dir)], catch_exceptions=False)
    assert result.exit_code == 1 and "holds no documents" in result.output and "hybrid-qpr ingest" in result.output


# ---------------------------------------------------------------------- damaged files
def _truncate(path: Path, size: int | None = None) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2 if size is None else size)


def _junk(path: Path, same_size: bool) -> None:
    path.write_bytes(os.urandom(path.stat().st_size) if same_size else b"this is not a database")


def _drop_model(index_dir: Path) -> None:
    manifest = json.loads((index_dir / "manifest.json").read_text())
    del manifest["model"]
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


def _flip_last_bytes(path: Path, count: int = 4) -> None:
    """A same-size edit: the last ``count`` bytes inverted (sizes still match the manifest)."""
    data = bytearray(path.read_bytes())
    data[-count:] = bytes(b ^ 0xFF for b in data[-count:])
    path.write_bytes(bytes(data))


def _flip_bytes(path: Path, offset: int, count: int = 1) -> None:
    """A same-size edit: ``count`` bytes from ``offset`` inverted."""
    data = bytearray(path.read_bytes())
    data[offset:offset + count] = bytes(b ^ 0xFF for b in data[offset:offset + count])
    path.write_bytes(bytes(data))


def _edit_first_digit(path: Path) -> None:
    """One byte of the manifest changed: the first digit of the first file record's CRC32."""
    text = path.read_text(encoding="utf-8")
    at = text.index('"crc32": ') + len('"crc32": ')
    path.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:], encoding="utf-8")


def _edit_a_text(path: Path) -> None:
    """A same-size edit of one document's text inside docs.sqlite."""
    data = path.read_bytes()
    old = b"how do i change my password?"
    assert old in data
    path.write_bytes(data.replace(old, b"HOW DO I CHANGE MY PASSWORD?", 1))


def _move_a_tombstone(seg: Path) -> None:
    """The tombstone file's row 0 (q000) changed to row 5: same size, another document hidden."""
    import numpy as np

    file = _tombstones(seg)[0]
    rows = np.load(file)
    rows[0] = 5
    np.save(file, rows)


def _tombstones(seg: Path) -> list[Path]:
    """The segment's tombstone file and its copy."""
    main = next(p for p in seg.glob("deleted.*.npy") if not p.name.endswith(".copy.npy"))
    return [main, main.with_name(main.name.replace(".npy", ".copy.npy"))]


def _edit_manifest(index_dir: Path, edit) -> None:
    """A valid-JSON edit of the manifest that keeps its stored checksum."""
    manifest = json.loads((index_dir / "manifest.json").read_text())
    edit(manifest)
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


def _with_checksum(index_dir: Path, edit) -> None:
    """An edit written with a fresh checksum (as a buggy writer would): only the type checks can catch it."""
    from hybrid_qpr.backends.local.commit import CHECKSUM_KEY, manifest_checksum

    def edit_and_sign(manifest):
        edit(manifest)
        manifest[CHECKSUM_KEY] = manifest_checksum(manifest)
    _edit_manifest(index_dir, edit_and_sign)


DAMAGE = {  # case -> (damage it, the file the message must name, how it is recovered)
    "faiss-truncated": (lambda seg, idx: _truncate(seg / "vectors.faiss"), "vectors.faiss", "optimize"),
    "faiss-empty": (lambda seg, idx: _truncate(seg / "vectors.faiss", 0), "vectors.faiss", "optimize"),
    "faiss-bytes-flipped": (lambda seg, idx: _junk(seg / "vectors.faiss", True), "vectors.faiss", "optimize"),
    "vectors-missing": (lambda seg, idx: (seg / "vectors.npy").unlink(), "vectors.npy", "optimize"),
    "vectors-truncated": (lambda seg, idx: _truncate(seg / "vectors.npy"), "vectors.npy", "optimize"),
    "postings-truncated": (lambda seg, idx: _truncate(seg / "bm25.tf.npy"), "bm25.tf.npy", "optimize"),
    # docs.sqlite unreadable: rebuilt from its second copy (the text store and the ids file)
    "sqlite-junk": (lambda seg, idx: _junk(seg / "docs.sqlite", True), "docs.sqlite", "optimize"),
    "sqlite-junk-short": (lambda seg, idx: _junk(seg / "docs.sqlite", False), "docs.sqlite", "optimize"),
    # ... and its ids file too: the texts survive but no id verifies, so the segment can only be dropped
    "sqlite-and-ids-junk": (lambda seg, idx: (_junk(seg / "docs.sqlite", True), _junk(seg / "docs.ids.json", True)),
                            "docs.sqlite", "drop"),
    # docs.sqlite readable but changed: rebuilt from the text store, its ids verified by the manifest's ids_crc32
    "sqlite-reserved-bytes-flipped": (lambda seg, idx: _flip_bytes(seg / "docs.sqlite", 72), "docs.sqlite", "optimize"),
    "tombstones-missing": (lambda seg, idx: _tombstones(seg)[0].unlink(), "deleted.", "optimize"),
    # both copies: the row removed by 'delete' has no other record, so the segment cannot be kept
    "tombstones-and-copy-missing": (lambda seg, idx: [f.unlink() for f in _tombstones(seg)], "deleted.", "drop"),
    "manifest-without-model": (lambda seg, idx: _drop_model(idx), "manifest.json", "repair"),
    "manifest-not-json": (lambda seg, idx: _flip_bytes(idx / "manifest.json", 0), "manifest.json", "repair"),
    "manifest-one-digit-edited": (lambda seg, idx: _edit_first_digit(idx / "manifest.json"), "manifest.json", "repair"),
    # same-size edits: the sizes match the manifest, only the CRC32 checked at open catches them
    "doclen-bytes-flipped": (lambda seg, idx: _flip_last_bytes(seg / "bm25.doclen.npy"), "bm25.doclen.npy", "optimize"),
    "rows-bytes-flipped": (lambda seg, idx: _flip_last_bytes(seg / "bm25.rows.npy"), "bm25.rows.npy", "optimize"),
    "sqlite-text-edited": (lambda seg, idx: _edit_a_text(seg / "docs.sqlite"), "docs.sqlite", "optimize"),
    # the text store (read by row for result pages): its size checked at open, its CRC32 on first use
    "texts-truncated": (lambda seg, idx: _truncate(seg / "docs.text"), "docs.text", "optimize"),
    "texts-bytes-flipped": (lambda seg, idx: _flip_last_bytes(seg / "docs.text"), "docs.text", "optimize"),
    "offsets-bytes-flipped": (lambda seg, idx: _flip_last_bytes(seg / "docs.offsets.npy"), "docs.offsets.npy",
                              "optimize"),
    # a broken .npy header: named as the offsets file (before: reported as a docs.text problem)
    "offsets-header-broken": (lambda seg, idx: _flip_bytes(seg / "docs.offsets.npy", 0), "docs.offsets.npy", "optimize"),
    # read from the tombstones' second copy
    "tombstones-byte-flipped": (lambda seg, idx: _flip_last_bytes(_tombstones(seg)[0], 1), "deleted.", "optimize"),
    "tombstone-row-edited": (lambda seg, idx: _move_a_tombstone(seg), "deleted.", "optimize"),
    # valid JSON that lost an entry: the manifest's own checksum
    "manifest-lost-segment": (lambda seg, idx: _edit_manifest(idx, lambda m: m["segments"].pop()), "manifest.json",
                              "repair"),
    "manifest-lost-tombstones": (lambda seg, idx: _edit_manifest(idx, lambda m: m["segments"][0].update(
        deletions=None, deleted=0)), "manifest.json", "repair"),
    # a wrong type under a valid checksum, and in a manifest written before checksums existed
    "manifest-count-as-string": (lambda seg, idx: _with_checksum(idx, lambda m: m["segments"][0].update(count="100")),
                                 "manifest.json", "repair"),
    "manifest-unsigned-count-as-string": (lambda seg, idx: _edit_manifest(idx, lambda m: (
        m["segments"][0].update(count="100"), m.pop("manifest_crc32"))), "manifest.json", "repair"),
}


READ_ON_FIRST_USE = ("faiss-bytes-flipped", "texts-bytes-flipped", "offsets-bytes-flipped")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory, committed_encoder, question_bank):
    """Two segments of 100 questions; q000 deleted (so the first segment has tombstones)."""
    idx = LocalIndex.create(tmp_path_factory.mktemp("healthy") / "idx", committed_encoder)
    idx.ingest(question_bank[:100], committed_encoder, show_progress=False)
    idx.ingest(question_bank[100:], committed_encoder, show_progress=False)
    idx.delete(["q000"])
    return idx.path


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_index_gives_one_line_and_check_names_it(case, healthy, tmp_path, question_bank):
    index_dir = tmp_path / "idx"
    shutil.copytree(healthy, index_dir)
    first_segment = index_dir / "segments" / json.loads((index_dir / "manifest.json").read_text())["segments"][0]["name"]
    damage, file, recovery = DAMAGE[case]
    damage(first_segment, index_dir)
    runner = CliRunner()
    bank = write_jsonl(tmp_path / "more.jsonl", [Document("new1", "a brand new question?")])
    commands = [["query", "how do i change my password?", "--index", str(index_dir)],
                ["query", "how do i change my password?", "--index", str(index_dir), "--mode", "knn"]]
    if case not in READ_ON_FIRST_USE:  # an ingest checks sizes, not checksums, and never reads these files
        commands.append(["ingest", str(bank), "--index", str(index_dir)])
    for args in commands:
        result = runner.invoke(cli, args, catch_exceptions=False)  # a traceback would raise here
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1, (case, result.output)
        assert "is damaged" in lines[0] and file in lines[0] and "Fix:" in lines[0], (case, lines[0])
    checked = runner.invoke(cli, ["index", "check", str(index_dir)], catch_exceptions=False)
    assert checked.exit_code == 1 and file in checked.output and "fix:" in checked.output, (case, checked.output)
    if recovery is None:
        return
    if recovery == "repair":  # the manifest: rebuilt from its copy, every segment verified and kept
        assert "index repair" in checked.output, checked.output
        repaired = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
        assert "2 segment(s) kept" in repaired.output and "left out" not in repaired.output, repaired.output
        expected = {d.id: d.text for d in question_bank[1:]}
    else:
        repaired = runner.invoke(cli, ["index", "optimize", str(index_dir)], catch_exceptions=False)
    if recovery == "drop":
        assert "texts are lost" not in repaired.output
        assert repaired.exit_code == 1 and "--drop-damaged" in repaired.output and file in repaired.output
        # the refused optimize copied nothing: the damage is still there for check to see
        assert runner.invoke(cli, ["index", "check", str(index_dir)]).exit_code == 1
        asked = runner.invoke(cli, ["index", "optimize", str(index_dir), "--drop-damaged"], input="n\n")
        assert asked.exit_code == 1 and "Drop it?" in asked.output and "would be lost" in asked.output, asked.output
        assert runner.invoke(cli, ["index", "check", str(index_dir)]).exit_code == 1  # declined: nothing changed
        repaired = runner.invoke(cli, ["index", "optimize", str(index_dir), "--drop-damaged", "--yes"],
                                 catch_exceptions=False)
        assert (index_dir / "damaged" / first_segment.name / "lost.json").is_file()
        expected = {d.id: d.text for d in question_bank[100:]}
    else:
        expected = {d.id: d.text for d in question_bank[1:]}
    assert repaired.exit_code == 0, repaired.output
    assert runner.invoke(cli, ["index", "check", str(index_dir)]).exit_code == 0
    assert state(index_dir) == expected
    result = runner.invoke(cli, ["query", "how do i change my password?", "--index", str(index_dir), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["hits"]


def test_tombstones_of_updated_rows_are_rebuilt_not_dropped(tmp_path, committed_encoder, question_bank):
    """A flipped byte in a tombstone file and its copy, whose rows were all replaced by later ingests: the
    ids live in the newer segment say which rows are dead, so optimize rebuilds the
    tombstones and keeps every text (before: '--drop-damaged' dropped the whole segment)."""
    index_dir = tmp_path / "idx"
    idx = LocalIndex.create(index_dir, committed_encoder)
    idx.ingest(question_bank[:100], committed_encoder, show_progress=False)
    updated = [Document(d.id, d.text + " (updated)") for d in question_bank[:10]]
    idx.ingest(updated + question_bank[100:120], committed_encoder, show_progress=False)
    first = index_dir / "segments" / idx.manifest["segments"][0]["name"]
    for file in _tombstones(first):  # both copies
        _flip_last_bytes(file, 1)
    runner = CliRunner()
    result = runner.invoke(cli, ["query", "how do i change my password?", "--index", str(index_dir)])
    assert result.exit_code == 1 and "deleted." in result.output and "--drop-damaged" not in result.output
    checked = runner.invoke(cli, ["index", "check", str(index_dir)])
    assert checked.exit_code == 1 and "deleted." in checked.output and "--drop-damaged" not in checked.output
    repaired = runner.invoke(cli, ["index", "optimize", str(index_dir)], catch_exceptions=False)
    assert repaired.exit_code == 0 and "dropped" not in repaired.output, repaired.output
    assert runner.invoke(cli, ["index", "check", str(index_dir)]).exit_code == 0
    assert state(index_dir) == {d.id: d.text for d in question_bank[10:120]} | {d.id: d.text for d in updated}


def test_drop_damaged_drops_nothing_the_checksums_do_not_confirm(tmp_path, healthy):
    """A segment that cannot be read as its manifest entry says while every file matches its
    size and CRC32 (here: a count edited under a fresh manifest checksum) is not dropped."""
    index_dir = tmp_path / "idx"
    shutil.copytree(healthy, index_dir)
    _with_checksum(index_dir, lambda m: m["segments"][1].update(count=101))
    result = CliRunner().invoke(cli, ["index", "optimize", str(index_dir), "--drop-damaged"], catch_exceptions=False)
    assert result.exit_code == 1 and "not dropped" in result.output and "matches its size and CRC32" in result.output
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert len(manifest["segments"]) == 2 and all((index_dir / "segments" / e["name"]).is_dir()
                                                  for e in manifest["segments"])


def test_repair_without_a_copy_keeps_what_verifies_and_names_the_rest(tmp_path, healthy, question_bank):
    """An index written before the manifest copy: the damaged manifest's own entries are kept
    where the files match them; a segment whose file changed is left out and named."""
    index_dir = tmp_path / "idx"
    shutil.copytree(healthy, index_dir)
    (index_dir / "manifest.copy.json").unlink()
    manifest = json.loads((index_dir / "manifest.json").read_text())
    manifest["count"] = 7  # a one-field edit: the manifest's checksum no longer matches
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    runner = CliRunner()
    repaired = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
    assert repaired.exit_code == 0 and "2 segment(s) kept, 199 documents" in repaired.output, repaired.output
    assert state(index_dir) == {d.id: d.text for d in question_bank[1:]}
    # now both the manifest and its copy are damaged, and so is the second segment's docs.sqlite
    (index_dir / "manifest.json").write_text("{" + (index_dir / "manifest.json").read_text())
    (index_dir / "manifest.copy.json").write_text("[]")
    second = index_dir / "segments" / manifest["segments"][1]["name"]
    _junk(second / "docs.sqlite", True)
    result = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
    assert result.exit_code == 1 and "cannot be repaired" in result.output  # nothing left that names the model
    (index_dir / "manifest.json").write_text(json.dumps(manifest))  # the edited, readable one again
    result = runner.invoke(cli, ["index", "repair", str(index_dir)], catch_exceptions=False)
    assert result.exit_code == 1 and "1 segment(s) kept, 99 documents" in result.output, result.output
    assert f"left out segments/{second.name}: segments/{second.name}/docs.sqlite" in result.output
    assert state(index_dir) == {d.id: d.text for d in question_bank[1:100]}


def test_a_lost_manifest_is_restored_from_its_copy(tmp_path, healthy, question_bank):
    index_dir = tmp_path / "idx"
    shutil.copytree(healthy, index_dir)
    (index_dir / "manifest.json").unlink()
    runner = CliRunner()
    result = runner.invoke(cli, ["query", "how do i change my password?", "--index", str(index_dir)])
    assert result.exit_code == 1 and "manifest.json is missing" in result.output and "index repair" in result.output
    checked = runner.invoke(cli, ["index", "check", str(index_dir)])
    assert checked.exit_code == 1 and "index repair" in checked.output
    assert runner.invoke(cli, ["index", "repair", str(index_dir)]).exit_code == 0
    assert runner.invoke(cli, ["index", "check", str(index_dir)]).exit_code == 0
    assert state(index_dir) == {d.id: d.text for d in question_bank[1:]}
