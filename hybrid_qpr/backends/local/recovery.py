"""Reading segments back for a merge or ``optimize``, rebuilding what is damaged from the
segment's second copies, and setting aside what cannot be rebuilt.

Every file a merge reads (documents, tombstones, vectors) is checked against its size and
CRC32 first: a merge must never copy damage into a new segment with fresh checksums. Each part
of a segment is kept twice, so that one damaged file never costs a document::

    ids              docs.sqlite; docs.ids.json (and the manifest's ids_crc32, which verifies
                     the ids SQLite still returns from a damaged docs.sqlite)
    texts, metadata  docs.sqlite; docs.text with docs.offsets.npy
    tombstones       deleted.<gen>.npy; deleted.<gen>.copy.npy (and, for the rows an update
                     replaced, the ids live in other segments)
    vectors          vectors.npy; the texts, re-encoded with the index's model
    FAISS, BM25      rebuilt from the above

What cannot be rebuilt (both copies damaged, or a segment written before the second copies
existed) is a ``Loss``, with the live ids it costs when they can still be read. ``optimize``
names it and drops it only when told to, after asking, and ``set_aside`` first moves the
segment's files to ``damaged/`` inside the index. A lost document whose older version is
still stored, tombstoned by the update, gets that version back (``Loss.restored``). A healthy
segment written before the second copies gets them from ``add_missing_copies``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr.artifacts import load_npy
from hybrid_qpr.backends.local import textstore
from hybrid_qpr.backends.local.segment import (DAMAGED_DIR, DOCS_DB, IDS_FILE, IDS_KEY, SEGMENTS_DIR, VECTORS,
                                               checksum, damaged, file_problems, file_record, fix_for, fsync_path,
                                               has_text_store, ids_checksum, lost_fix, map_npy, stored_rows, write_ids)
from hybrid_qpr.backends.local.storage import access_refusal, unreadable, write_refusal
from hybrid_qpr.backends.local.textstore import OFFSETS_FILE, TEXT_FILE, TextStore, write_texts
from hybrid_qpr.distance import Distance, prepare_vectors
from hybrid_qpr.errors import ConfigError, IndexDamagedError

logger = logging.getLogger(__name__)

LOST_FILE = "lost.json"  # in damaged/<segment>/: why it was dropped and the ids it cost
SHOWN_IDS = 20  # ids a listing shows per segment (lost.json holds them all)


@dataclass
class LiveRows:
    """The live rows of one segment, in row order, as a merge reads them."""

    ids: list[str]
    texts: list[str]
    metadata: list[str]  # JSON texts
    vectors: np.ndarray  # float32 [len(ids), dim]


@dataclass
class Loss:
    """A segment that cannot be rebuilt: why, and what dropping it costs."""

    segment: str
    problem: str
    live: int  # live documents the manifest counts in the segment
    # ids of those documents, as far as they can still be read (None: unreadable). With
    # ``uncertain`` (its tombstones are lost): every row not known to be deleted, ``live`` of them live
    ids: list[str] | None
    uncertain: bool = False
    verified: bool = True  # False: the ids as far as a damaged docs.sqlite still returns them
    restored: dict[str, str] = field(default_factory=dict)  # id -> the segment whose older version comes back

    @property
    def lost(self) -> int:
        """Live documents dropping the segment costs."""
        return self.live - len(self.restored)

    def summary(self) -> str:
        """What dropping the segment costs, in one sentence."""
        if self.ids is None:
            return f"its {self.live} live documents would be lost (their ids cannot be read)"
        if self.uncertain:
            return f"{self.live} live documents among these {len(self.ids)} ids would be lost: {_shown(self.ids)}"
        lost = [doc_id for doc_id in self.ids if doc_id not in self.restored]
        text = f"{len(lost)} documents would be lost" + (f": {_shown(lost)}" if lost else "")
        if not self.verified:
            text += f" (the ids as far as the damaged {DOCS_DB} still returns them, unverified)"
        if self.restored:
            text += (f"; {len(self.restored)} updated documents would get their older version back from "
                     f"{', '.join(sorted(set(self.restored.values())))}: {_shown(list(self.restored))}")
        return text


def _shown(ids: Sequence[str]) -> str:
    text = ", ".join(json.dumps(i, ensure_ascii=False) for i in ids[:SHOWN_IDS])
    return text + (f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")


class _Unrecoverable(Exception):
    """A segment's documents have no intact copy left (``problem``); ``ids``: as far as readable
    (``verified``: by the ids file or the manifest's ``ids_crc32``)."""

    def __init__(self, problem: str, ids: list[str] | None, verified: bool):
        super().__init__(problem)
        self.problem, self.ids, self.verified = problem, ids, verified


def intact(path: Path, record: dict[str, int] | None) -> bool:
    """Whether ``path`` has the size and CRC32 its manifest ``record`` holds."""
    return record is not None and path.is_file() and path.stat().st_size == record["bytes"] \
        and checksum(path) == record["crc32"]


def _refuse_unreadable(index_path: Path, entry: dict[str, Any]) -> None:
    """Permissions are not damage: never a reason to drop a segment."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    deletions = entry.get("deletions") or {}
    for file in (DOCS_DB, VECTORS, IDS_FILE, *textstore.FILES, deletions.get("file"),
                 (deletions.get("copy") or {}).get("file")):
        if file and unreadable(seg_dir / file):
            raise access_refusal(seg_dir / file, writing=False)


def _documents(index_path: Path, entry: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(id, text, metadata)`` of every row: from ``docs.sqlite`` when it matches its
    checksum; else from the intact text store with verified ids (``_verified_ids``). Raises
    ``_Unrecoverable`` when no intact copy is left, ``IndexDamagedError`` when the files match
    their checksums but not the manifest entry (nothing confirms damage then)."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    rel, count, files = f"{SEGMENTS_DIR}/{entry['name']}/{DOCS_DB}", int(entry["count"]), entry.get("files") or {}
    stored: list[tuple] | None = None
    try:
        stored = stored_rows(seg_dir, "id, text, metadata")
    except sqlite3.Error as exc:
        unreadable_reason = str(exc)
    if intact(seg_dir / DOCS_DB, files.get(DOCS_DB)):
        if stored is None:
            raise damaged(index_path, f"{rel} cannot be read ({unreadable_reason})", fix_for(DOCS_DB, index_path))
        if len(stored) != count:
            raise damaged(index_path, f"{rel} holds {len(stored)} rows, expected {count}", fix_for(DOCS_DB, index_path))
        return stored
    # confirmed damaged (size or CRC32 against the manifest): rebuild it from the second copies
    texts = _text_store_rows(seg_dir, entry)
    ids = _verified_ids(seg_dir, entry, stored, texts)
    what = f"{rel} is missing or has changed since it was written (size or CRC32)"
    readable = [str(row[0]) for row in stored] if stored else None  # unverified
    if texts is None:
        raise _Unrecoverable(f"{what}, and the segment has no intact text store to rebuild it from", ids or readable,
                             ids is not None)
    if ids is None:
        raise _Unrecoverable(f"{what}; its texts are intact in {TEXT_FILE} but its ids cannot be read back and "
                             "verified", readable, False)
    logger.warning("%s: rebuilding %s from the segment's text store and ids", index_path, rel)
    return [(doc_id, text, meta) for doc_id, (text, meta) in zip(ids, texts)]


def _crc_matches(ids: list[Any], entry: dict[str, Any]) -> bool:
    try:
        return ids_checksum(ids) == entry[IDS_KEY]
    except (TypeError, ValueError):  # not JSON text (a damaged row, a lone surrogate)
        return False


def _verified_ids(seg_dir: Path, entry: dict[str, Any], stored: list[tuple] | None,
                  texts: list[tuple[str, str]] | None) -> list[str] | None:
    """The segment's ids in row order from a copy that verifies, else ``None``: the ids file
    when it matches its checksum; else the ids SQLite still returns from the damaged
    ``docs.sqlite`` when they match the manifest's ``ids_crc32`` (a segment written before it:
    when every text and metadata SQLite returns is the text store's and the ids are distinct)."""
    count, files = int(entry["count"]), entry.get("files") or {}
    if intact(seg_dir / IDS_FILE, files.get(IDS_FILE)):
        try:
            ids = json.loads((seg_dir / IDS_FILE).read_text(encoding="ascii"))
        except (OSError, ValueError):
            ids = None
        if isinstance(ids, list) and len(ids) == count and all(isinstance(i, str) for i in ids) \
                and (IDS_KEY not in entry or _crc_matches(ids, entry)):
            return ids
    if stored is None or len(stored) != count:
        return None
    ids = [row[0] for row in stored]
    if IDS_KEY in entry:
        return ids if _crc_matches(ids, entry) else None
    if texts is not None and len(set(ids)) == count and all(isinstance(i, str) and i for i in ids) \
            and [tuple(row[1:]) for row in stored] == texts:
        return ids
    return None


def _text_store_rows(seg_dir: Path, entry: dict[str, Any]) -> list[tuple[str, str]] | None:
    """Every row's ``(text, metadata)`` from the text store, or ``None`` when the segment has
    none or it does not match its checksums or fit its row count."""
    files = entry.get("files") or {}
    if not all(intact(seg_dir / file, files.get(file)) for file in textstore.FILES):
        return None
    count = int(entry["count"])
    try:
        with open(seg_dir / TEXT_FILE, "rb") as text, open(seg_dir / OFFSETS_FILE, "rb") as offsets:
            store = TextStore(text, map_npy(offsets))
            try:
                return None if store.problem(count) else store.rows(range(count))
            finally:
                store.close()
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _tombstones(index_path: Path, entry: dict[str, Any]) -> np.ndarray | None:
    """The segment's deleted rows, from its tombstone file or else its copy, whichever matches
    its checksum; ``None`` when neither does (``_rebuilt_tombstones`` may then rebuild them)."""
    record = entry.get("deletions")
    if not record:
        return np.zeros(0, dtype=np.int64)
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    count, deleted = int(entry["count"]), int(entry["deleted"])
    for copy in (record, record.get("copy")):
        if copy and intact(seg_dir / copy["file"], copy):
            found = load_npy(seg_dir / copy["file"])
            if found.ndim != 1 or len(found) != deleted or (len(found) and (found.min() < 0 or found.max() >= count)):
                raise damaged(index_path, f"{SEGMENTS_DIR}/{entry['name']}/{copy['file']} does not hold {deleted} "
                              f"rows below {count}", fix_for(copy["file"], index_path))
            if copy is not record:
                logger.warning("%s: segment %s: reading its tombstones from %s", index_path, entry["name"], copy["file"])
            return found.astype(np.int64)
    return None


def _tombstones_problem(entry: dict[str, Any]) -> str:
    record = entry["deletions"]
    files = " and its copy" if record.get("copy") else ""
    return (f"{SEGMENTS_DIR}/{entry['name']}/{record['file']} (tombstones){files} missing or changed since written "
            "(size or CRC32)")


def _rebuilt_tombstones(entry: dict[str, Any], ids: list[str], live_elsewhere: set[str]) -> np.ndarray | None:
    """The deleted rows rebuilt as the rows whose ids are live in another segment (an update
    tombstones the older row), when they account for every deleted row the manifest counts;
    rows removed by 'delete' have no such record, so else ``None``."""
    shadowed = np.asarray([row for row, doc_id in enumerate(ids) if doc_id in live_elsewhere], dtype=np.int64)
    return shadowed if len(shadowed) == int(entry["deleted"]) else None


def _mask(count: int, deleted_rows: np.ndarray) -> np.ndarray:
    """Bool mask of the live rows."""
    live = np.ones(count, dtype=bool)
    live[deleted_rows] = False
    return live


def _live_rows(index_path: Path, entry: dict[str, Any], rows: list[tuple[str, str, str]], live: np.ndarray, dim: int,
               distance: Distance, encoder) -> LiveRows:
    """The ``live`` rows with their vectors: stored when ``vectors.npy`` verifies, else the texts
    re-encoded with ``encoder`` (without one: ``IndexDamagedError``, never a loss: the texts survive)."""
    seg_dir, files = index_path / SEGMENTS_DIR / entry["name"], entry.get("files") or {}
    keep = np.flatnonzero(live)
    vectors = None
    if VECTORS in files and intact(seg_dir / VECTORS, files[VECTORS]):
        try:
            stored = load_npy(seg_dir / VECTORS, mmap_mode="r")
            if stored.shape == (len(rows), dim):
                vectors = np.asarray(stored[keep], dtype=np.float32)
        except (OSError, ValueError):
            vectors = None
    if vectors is None:
        if encoder is None:
            raise damaged(index_path, f"{SEGMENTS_DIR}/{entry['name']}/{VECTORS} is damaged and no encoder was given "
                          "to re-encode it", fix_for(VECTORS, index_path) + " (--model names it)")
        logger.warning("re-encoding %d texts of segment %s (its vectors are damaged)", len(keep), entry["name"])
        vectors = prepare_vectors(encoder.encode([rows[i][1] for i in keep], show_progress=False, side="document"),
                                  distance)
    return LiveRows([rows[i][0] for i in keep], [rows[i][1] for i in keep], [rows[i][2] for i in keep], vectors)


def read_live_rows(index_path: Path, entry: dict[str, Any], dim: int, distance: Distance, encoder) -> LiveRows:
    """A segment's live rows straight from its files, for a merge: each file checked against
    its CRC32 first and a damaged one read from its second copy; what cannot be rebuilt raises
    ``IndexDamagedError`` naming ``--drop-damaged`` (``lost_fix``). FAISS and BM25 files are not read."""
    _refuse_unreadable(index_path, entry)
    try:
        rows = _documents(index_path, entry)
    except _Unrecoverable as exc:
        raise damaged(index_path, exc.problem, lost_fix(index_path)) from None
    deleted = _tombstones(index_path, entry)
    if deleted is None:
        raise damaged(index_path, _tombstones_problem(entry), fix_for(entry["deletions"]["file"], index_path))
    return _live_rows(index_path, entry, rows, _mask(len(rows), deleted), dim, distance, encoder)


@dataclass
class _Read:
    """One segment as far as ``read_for_optimize`` could read it."""

    entry: dict[str, Any]
    rows: list[tuple[str, str, str]] | None = None  # None: no intact copy
    live: np.ndarray | None = None  # bool mask; None: its tombstones are lost
    loss: Loss | None = None


def read_for_optimize(index_path: Path, entries: Sequence[dict[str, Any]], dim: int, distance: Distance, encoder,
                      drop_damaged: bool) -> tuple[list[LiveRows], list[Loss]]:
    """Every segment's live rows for ``optimize``, rebuilt from the second copies where a file
    is damaged, and the ``Loss`` of each segment that cannot be rebuilt (its rows left out).
    Without ``drop_damaged`` a loss raises ``IndexDamagedError`` naming what it costs. A loss
    arises only from damage its checksums confirm; anything else is raised (with
    ``drop_damaged``, saying that nothing is dropped)."""
    reads: dict[str, _Read] = {}
    for entry in entries:
        _refuse_unreadable(index_path, entry)
        read = reads[entry["name"]] = _Read(entry)
        try:
            read.rows = _documents(index_path, entry)
            ids = [row[0] for row in read.rows]
        except _Unrecoverable as exc:
            read.loss = Loss(entry["name"], exc.problem, int(entry["count"]) - int(entry.get("deleted", 0)), exc.ids,
                             verified=exc.verified)
            ids = exc.ids if exc.ids is not None and len(exc.ids) == int(entry["count"]) else None
        except IndexDamagedError as exc:
            raise _unconfirmed(exc, index_path, entry, drop_damaged) from None
        try:
            deleted = _tombstones(index_path, entry)
        except IndexDamagedError as exc:
            raise _unconfirmed(exc, index_path, entry, drop_damaged) from None
        if deleted is not None:
            read.live = _mask(int(entry["count"]), deleted)
            if read.loss is not None and ids is not None:
                read.loss.ids = [doc_id for doc_id, live in zip(ids, read.live) if live]
    _rebuild_lost_tombstones(reads)
    _restore_older_versions(reads)
    losses = [read.loss for read in reads.values() if read.loss is not None]
    if losses and not drop_damaged:
        more = f" (and {len(losses) - 1} more segments)" if len(losses) > 1 else ""
        raise damaged(index_path, f"{losses[0].problem}: {losses[0].summary()}{more}", lost_fix(index_path))
    parts = [_live_rows(index_path, read.entry, read.rows, read.live, dim, distance, encoder)
             for read in reads.values() if read.loss is None]
    return parts, losses


def _unconfirmed(exc: IndexDamagedError, index_path: Path, entry: dict[str, Any], drop_damaged: bool) -> Exception:
    if drop_damaged and not file_problems(index_path, entry, checksums=True):
        return IndexDamagedError(f"{exc} (not dropped: every file of segment {entry['name']} matches its size and "
                                 "CRC32, so the damage is not confirmed)")
    return exc


def _live_ids(reads: dict[str, _Read], but: str) -> set[str]:
    """The ids live in the segments of ``reads`` other than ``but`` (a lost segment's too, where
    its ids and tombstones verify: they still say which older rows were updated)."""
    out: set[str] = set()
    for name, read in reads.items():
        if name == but or read.live is None:
            continue
        if read.rows is not None:
            out.update(row[0] for row, live in zip(read.rows, read.live) if live)
        elif read.loss is not None and read.loss.ids and read.loss.verified and not read.loss.uncertain:
            out.update(read.loss.ids)
    return out


def _rebuild_lost_tombstones(reads: dict[str, _Read]) -> None:
    """Rebuild each lost tombstone file from the ids live in the other segments, or make the
    segment a loss (keeping it would bring documents deleted by 'delete' back)."""
    for name, read in reads.items():
        if read.live is not None:
            continue
        entry = read.entry
        ids = [row[0] for row in read.rows] if read.rows is not None else (read.loss.ids if read.loss else None)
        if ids is None or len(ids) != int(entry["count"]):
            continue  # the documents are lost too and their ids unreadable: the loss says so
        elsewhere = _live_ids(reads, name)
        deleted = _rebuilt_tombstones(entry, ids, elsewhere)
        if deleted is not None:
            logger.warning("segment %s: rebuilding its tombstones from the ids live in other segments (%d rows)",
                           name, len(deleted))
            read.live = _mask(len(ids), deleted)
            if read.loss is not None:
                read.loss.ids = [doc_id for doc_id, live in zip(ids, read.live) if live]
            continue
        shadowed = sum(doc_id in elsewhere for doc_id in ids)
        why = (f"{_tombstones_problem(entry)}; {shadowed} of its {entry['deleted']} deleted rows can be rebuilt (the "
               "ones updated in other segments), so keeping it would bring deleted documents back")
        candidates = [doc_id for doc_id in ids if doc_id not in elsewhere]
        if read.loss is None:
            read.loss = Loss(name, why, int(entry["count"]) - int(entry.get("deleted", 0)), candidates, uncertain=True)
        else:
            read.loss.problem, read.loss.ids, read.loss.uncertain = f"{read.loss.problem}; {why}", candidates, True


def _number(segment: str) -> int:
    """A segment's number (``s000012-ab12cd`` -> 12): a later write has a higher one."""
    return int(segment[1:segment.index("-")])


def _restore_older_versions(reads: dict[str, _Read]) -> None:
    """Give each document of a lost segment whose older version is stored tombstoned in a kept
    segment (an update replaced it) that version back: the newest one, by segment number."""
    wanted = {doc_id: read.loss for read in reads.values()
              if read.loss and read.loss.ids and read.loss.verified and not read.loss.uncertain
              for doc_id in read.loss.ids}
    if not wanted:
        return
    kept = {name: read for name, read in reads.items() if read.loss is None}
    wanted = {doc_id: loss for doc_id, loss in wanted.items() if doc_id not in _live_ids(kept, "")}
    newest: dict[str, tuple[int, str, int]] = {}
    for name, read in kept.items():
        for row in np.flatnonzero(~read.live):
            doc_id = read.rows[row][0]
            if doc_id in wanted and _number(name) > newest.get(doc_id, (-1, "", 0))[0]:
                newest[doc_id] = (_number(name), name, int(row))
    for doc_id, (_, name, row) in newest.items():
        kept[name].live[row] = True
        wanted[doc_id].restored[doc_id] = name


def has_second_copies(entry: dict[str, Any]) -> bool:
    """Whether the segment of ``entry`` holds every document twice: the text store and the ids
    file beside ``docs.sqlite`` (segments written by earlier versions may lack either)."""
    return has_text_store(entry) and IDS_FILE in (entry.get("files") or {})


def add_missing_copies(segments_dir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """The manifest entry of a segment written before the text store or the ids file, with
    what it lacks written into its directory from its ``docs.sqlite`` (``index optimize``). New
    names only, so readers of the commit that names the segment without them are unaffected;
    until a commit names them they are unused (and rewritten by the next attempt)."""
    seg_dir = segments_dir / entry["name"]
    tmp = seg_dir / ".texts.tmp"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        rows = stored_rows(seg_dir, "id, text, metadata")  # checked by the caller (optimize: CRC32 of every file)
        missing = [] if has_text_store(entry) else list(textstore.FILES)
        if missing:
            write_texts(tmp, [text for _, text, _ in rows], [meta for _, _, meta in rows])
        if IDS_FILE not in entry["files"]:
            write_ids(tmp, [doc_id for doc_id, _, _ in rows])
            missing.append(IDS_FILE)
        files = dict(entry["files"])
        for file in missing:
            fsync_path(tmp / file)
            files[file] = file_record(tmp / file)
            os.replace(tmp / file, seg_dir / file)
        fsync_path(seg_dir)
    except BaseException as exc:
        refusal = write_refusal(exc, tmp, 2 * (seg_dir / DOCS_DB).stat().st_size)
        if refusal is not None:
            raise refusal from exc
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {**entry, "files": files, IDS_KEY: ids_checksum([doc_id for doc_id, _, _ in rows])}


def set_aside(index_path: Path, loss: Loss) -> Path:
    """Move the files of the segment ``loss`` drops to ``damaged/<segment>/`` inside the index,
    with ``lost.json`` (why, and every id it costs), before the commit that drops it: each file
    is hard-linked (no space, and the segment stays whole for readers of the current commit),
    or copied where links are refused. Returns that folder."""
    root = index_path / DAMAGED_DIR
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise ConfigError(f"{root} is not a folder of the index (a link or a file); nothing was dropped. Fix: move it "
                          "away and rerun")
    target, tmp = root / loss.segment, root / f".{loss.segment}.tmp"
    source = index_path / SEGMENTS_DIR / loss.segment
    try:
        root.mkdir(exist_ok=True)
        for old in (tmp, target):  # what an interrupted attempt left (a committed drop retires the name)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
        tmp.mkdir()
        if source.is_dir() and not source.is_symlink():
            for file in sorted(source.iterdir()):
                if file.is_file() and not file.is_symlink():
                    try:
                        os.link(file, tmp / file.name, follow_symlinks=False)
                    except OSError:
                        shutil.copyfile(file, tmp / file.name, follow_symlinks=False)
        record = {"segment": loss.segment, "problem": loss.problem, "live_documents": loss.live, "ids": loss.ids,
                  "ids_verified": loss.verified, "ids_are_candidates": loss.uncertain,
                  "restored_older_version": loss.restored}
        (tmp / LOST_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="ascii")
        os.replace(tmp, target)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        refusal = write_refusal(exc, tmp)
        if refusal is not None:
            raise refusal from exc
        raise
    return target
