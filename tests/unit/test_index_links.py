"""A local index whose files and folders are symbolic (or hard) links out of it: every writing
command refuses in one line and nothing outside the index changes; queries still read it, and
the leftover cleanup a query runs never deletes through a link."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hybrid_qpr import resources
from hybrid_qpr.testing.cli import one_error_line, run

BEIR = resources.examples_dir() / "beir"


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed): its kind, and its bytes or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", path.read_bytes())
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """An index of the examples' corpus in two segments (two ingests)."""
    work = tmp_path_factory.mktemp("links")
    lines = (BEIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (work / "a.jsonl").write_text("".join(lines[:150]), encoding="utf-8")
    (work / "b.jsonl").write_text("".join(lines[150:]), encoding="utf-8")
    for part in ("a", "b"):
        assert run("ingest", str(work / f"{part}.jsonl"), "--index", str(work / "idx")).exit_code == 0
    assert len(json.loads((work / "idx" / "manifest.json").read_text())["segments"]) == 2
    return work / "idx"


def move_out(index: Path, rel: str, outside: Path) -> None:
    """Move ``index/rel`` to ``outside`` and leave a symbolic link to it in its place."""
    target = outside / rel.replace("/", "__")
    shutil.move(str(index / rel), target)
    os.symlink(target, index / rel)


def linked_segments_folder(index: Path, outside: Path) -> None:
    """``segments/`` is a link to a shared folder that also holds an unrelated file, a file named
    like a dead writer's temporary segment and a folder named like an uncommitted segment."""
    move_out(index, "segments", outside)
    shared = outside / "segments"
    (shared / "unrelated.txt").write_text("not the index's")
    (shared / ".s000099-abcdef.tmp").write_text("a user's file")
    (shared / "s000099-abcdef").mkdir()
    (shared / "s000099-abcdef" / "notes.txt").write_text("a user's folder")


def linked_files_and_segment(index: Path, outside: Path) -> None:
    """write.lock, both manifests, one segment folder and a file of the other segment are links;
    write.lock points at a user's file."""
    (outside / "precious.txt").write_text("precious\n")
    (index / "write.lock").unlink(missing_ok=True)
    os.symlink(outside / "precious.txt", index / "write.lock")
    for name in ("manifest.json", "manifest.copy.json"):
        move_out(index, name, outside)
    first, second = sorted(p.name for p in (index / "segments").iterdir() if p.name.startswith("s"))
    move_out(index, f"segments/{first}", outside)
    move_out(index, f"segments/{second}/docs.sqlite", outside)


def dangling_lock(index: Path, outside: Path) -> None:
    """write.lock is a link to a file that does not exist (a writer must not create it)."""
    (index / "write.lock").unlink(missing_ok=True)
    os.symlink(outside / "created-by-the-writer.txt", index / "write.lock")


def hard_linked_lock(index: Path, outside: Path) -> None:
    """write.lock is a second name of a user's file (a hard link)."""
    (outside / "precious.txt").write_text("precious\n")
    (index / "write.lock").unlink(missing_ok=True)
    os.link(outside / "precious.txt", index / "write.lock")


LAYOUTS = {"segments-folder": linked_segments_folder, "files-and-a-segment": linked_files_and_segment,
           "dangling-lock": dangling_lock, "hard-linked-lock": hard_linked_lock}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_writing_command_refuses_links_and_nothing_outside_changes(layout, built, tmp_path):
    index, outside = tmp_path / "idx", tmp_path / "outside"
    shutil.copytree(built, index, symlinks=True)
    outside.mkdir()
    LAYOUTS[layout](index, outside)
    before = snapshot(outside)
    inside = snapshot(index)
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "new-1", "text": "how do i renew a passport?"}) + "\n", encoding="utf-8")
    existing = json.loads((BEIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[0])["_id"]

    writes = {"ingest": ["ingest", str(new), "--index", str(index)],
              "delete": ["delete", existing, "--index", str(index)],
              "optimize": ["index", "optimize", str(index)],
              "optimize --drop-damaged": ["index", "optimize", str(index), "--drop-damaged"],
              "repair": ["index", "repair", str(index)],
              "tune": ["tune", "--beir", str(BEIR), "--split", "val", "--index", str(index), "--max-queries", "5"]}
    for name, args in writes.items():
        result = run(*args)
        if name == "repair" and result.exit_code == 0:
            # an intact manifest needs no repair, so no lock is taken and nothing written
            assert "nothing to repair" in result.output, result.output
        else:
            line = one_error_line(result) if name != "tune" else result.output.strip().splitlines()[-1]
            assert result.exit_code == 1, (name, result.output)
            assert ("symbolic link" in line and "nothing was written" in line) or \
                ("not a plain file of the index alone" in line), (name, result.output)
        assert snapshot(outside) == before, name

    # readers read through the links, and their leftover cleanup deletes nothing through them
    hits = run("query", "passport", "--index", str(index), "--mode", "bm25", "--json")
    assert hits.exit_code == 0 and json.loads(hits.output)["hits"], hits.output
    checked = run("index", "check", str(index))
    assert checked.exit_code == 0, checked.output
    assert snapshot(outside) == before
    assert snapshot(index) == inside  # nothing written inside either
    if layout in ("segments-folder", "files-and-a-segment"):
        assert "symbolic link" in checked.output, checked.output  # index check names the links


def test_a_link_replaced_by_a_copy_writes_again(built, tmp_path):
    """The printed fix works: 'cp -rL' makes a plain copy that takes writes."""
    index, outside = tmp_path / "idx", tmp_path / "outside"
    shutil.copytree(built, index, symlinks=True)
    outside.mkdir()
    linked_segments_folder(index, outside)
    line = one_error_line(run("delete", "x", "--index", str(index)))
    assert f"cp -rL {index} NEW_DIR" in line, line
    copy = tmp_path / "copy"
    shutil.copytree(index, copy, symlinks=False)  # what cp -rL does
    for leftover in ("unrelated.txt", ".s000099-abcdef.tmp", "s000099-abcdef"):  # the shared folder's own files
        assert (copy / "segments" / leftover).exists()
    result = run("delete", "x", "--index", str(copy))
    assert result.exit_code == 0 and result.output.startswith("deleted 0 of 1"), result.output
    assert not (copy / "segments" / "unrelated.txt").exists()  # inside a plain index, the cleanup's to remove
