"""One immutable segment of a local index: its documents, vectors, FAISS part and BM25 postings.

A segment directory ``segments/<name>/`` is written once, beside the index (in
``segments/.<name>.tmp``), fsynced and renamed into place; the manifest commit that lists it
is what makes it visible. Files::

    docs.sqlite       table docs(pos, id, text, metadata JSON); pos = row in every other file
    docs.text, docs.offsets.npy  the texts and metadata again, read by row (``textstore.py``)
    docs.ids.json     the ids again, in row order (a JSON list): with the text store, a second
                      copy of every document, so a damaged ``docs.sqlite`` costs none (``recovery.py``)
    vectors.npy       float32 [count, dim] encoder vectors (prepared for the distance)
    vectors.faiss     the FAISS index over those vectors
    bm25.*            postings (see ``hybrid_qpr.backends.local.bm25``)
    deleted.<gen>.npy int64 rows deleted by commit <gen> and before (tombstones; the
                      manifest names the current one), and ``deleted.<gen>.copy.npy``, the same rows
                      again: rows removed by 'delete' have no other record

The manifest records every file's byte size and CRC32 at commit, and the CRC32 of the segment's
ids (``ids_crc32``: what lets ``index optimize`` rebuild a damaged ``docs.sqlite`` from the text
store with ids it can trust). Opening a segment checks
every size and the CRC32 of the document store and the BM25 files (``OPEN_VERIFIED``); the
large files are checked on first use (``vectors.npy``, the text store) or before FAISS reads them
(``vectors.faiss``); ``hybrid-qpr index check`` checks everything. An open segment holds
every file open, so a reader keeps its snapshot while later commits delete those files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from hybrid_qpr.artifacts import NPY_HEADER_LOCK, load_npy
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.hugepages import back_with_huge_pages
from hybrid_qpr.backends.local.storage import access_refusal, unreadable, write_refusal
from hybrid_qpr.backends.local import textstore
from hybrid_qpr.backends.local.textstore import OFFSETS_FILE, TEXT_FILE, TextStore, write_texts
from hybrid_qpr.backends.local.vectors import SearchSettings, build_faiss, calibrate_ef
from hybrid_qpr.distance import Distance
from hybrid_qpr.errors import IndexDamagedError, require
from hybrid_qpr.progress import steps

SEGMENTS_DIR = "segments"
# where 'index optimize --drop-damaged' moves the files of a segment it drops (``recovery.py``)
DAMAGED_DIR = "damaged"
DOCS_DB, VECTORS, FAISS_FILE = "docs.sqlite", "vectors.npy", "vectors.faiss"
IDS_FILE = "docs.ids.json"
SEGMENT_FILES: tuple[str, ...] = (DOCS_DB, *textstore.FILES, IDS_FILE, VECTORS, FAISS_FILE, *bm25_lib.FILES)
# the factory of a segment whose vectors are nodes of the index's vector base (``vectorbase.py``):
# it has no FAISS file of its own
BASE_FACTORY = "base"
# checked against their CRC32 whenever a segment is opened for reading (docs/reliability.md:
# their cost at 1M documents); vectors.npy and vectors.faiss are checked on first use
OPEN_VERIFIED: tuple[str, ...] = (DOCS_DB, *bm25_lib.FILES)
SQL_CHUNK = 900  # parameters per IN (...) clause, below SQLite's oldest limit of 999
IDS_KEY = "ids_crc32"  # a segment entry's CRC32 of its ids (ids_checksum); segments written before have none
MMAP_BYTES = 1 << 30  # the most of a document store read through a memory map (SQLite caps it at 2 GB)

logger = logging.getLogger(__name__)


def checksum(source: Path | BinaryIO) -> int:
    """CRC32 of a file (a path, or an open binary file: read whole with ``pread``, which
    leaves its position alone, so threads may share it), in 1 MiB blocks."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as fh:
            return checksum(fh)
    crc = 0
    for block in _blocks(source):
        crc = zlib.crc32(block, crc)
    return crc


def _blocks(handle: BinaryIO, size: int = 1 << 20):
    offset = 0
    while block := os.pread(handle.fileno(), size, offset):
        offset += len(block)
        yield block


class _PositionalReader:
    """A file handle read front to back with ``pread`` (its own offset): FAISS's reader callback."""

    def __init__(self, handle: BinaryIO):
        self._fd, self._offset = handle.fileno(), 0

    def __call__(self, size: int) -> bytes:
        block = os.pread(self._fd, size, self._offset)
        self._offset += len(block)
        return block


def map_npy(handle: BinaryIO) -> np.ndarray:
    """A read-only memory map of the ``.npy`` array in the open file ``handle`` (mapping the
    handle, not its path, keeps the array readable after the file is unlinked)."""
    handle.seek(0)
    version = np.lib.format.read_magic(handle)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    with NPY_HEADER_LOCK:  # numpy parses the header with ast (see artifacts.NPY_HEADER_LOCK)
        shape, fortran, dtype = header(handle)
    if dtype.hasobject:
        raise ValueError("the array holds Python objects")
    if not shape or 0 in shape:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(handle, dtype=dtype, mode="r", offset=handle.tell(), shape=shape, order="F" if fortran else "C")


def file_record(path: Path) -> dict[str, int]:
    return {"bytes": path.stat().st_size, "crc32": checksum(path)}


def fsync_path(path: Path) -> None:
    """Flush a file or directory to disk (a rename is durable only once its directory is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(segments_dir: Path, name: str, ids: Sequence[str], texts: Sequence[str], metas: Sequence[str],
                  vectors: np.ndarray, distance: Distance, factory: str,
                  analyze: Callable[[str], list[str]]) -> dict[str, Any]:
    """Write a complete segment as ``segments_dir/name`` and return its manifest entry.
    ``metas`` are JSON texts; ``vectors`` are already prepared for ``distance``; ``analyze``
    gives a text's BM25 terms (the index's analyzer)."""
    faiss = require("faiss", feature="the local index")
    tmp = segments_dir / f".{name}.tmp"
    # a lower bound of the segment's size, for the message when the disk is full: the texts, and
    # the vectors twice (vectors.npy and the FAISS index hold them both)
    needed = 2 * int(np.asarray(vectors).nbytes) + sum(len(t.encode("utf-8")) for t in (*ids, *texts, *metas))
    current = tmp  # what is being written, for that message
    clock = [(time.perf_counter(), time.process_time())]

    def lap() -> str:  # wall and CPU seconds since the previous lap (the CPU share shows a busy machine)
        clock.append((time.perf_counter(), time.process_time()))
        return f"{clock[-1][0] - clock[-2][0]:.1f} s (CPU {clock[-1][1] - clock[-2][1]:.1f} s)"

    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        current = tmp / DOCS_DB
        db = sqlite3.connect(tmp / DOCS_DB)
        try:
            db.execute("PRAGMA journal_mode=OFF")  # written once, then read-only: no journal needed
            db.execute("CREATE TABLE docs (pos INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, "
                       "metadata TEXT NOT NULL)")
            db.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", zip(range(len(ids)), ids, texts, metas))
            db.commit()
        finally:
            db.close()
        current = tmp / TEXT_FILE
        write_texts(tmp, texts, metas)
        write_ids(tmp, ids)
        times = {"sqlite": lap()}
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        current = tmp / VECTORS
        np.save(tmp / VECTORS, vectors, allow_pickle=False)
        ef_search = None
        if factory != BASE_FACTORY:
            graph = build_faiss(vectors, distance, factory)
            current = tmp / FAISS_FILE
            faiss.write_index(graph, str(tmp / FAISS_FILE))
            times[factory] = lap()
            ef_search = calibrate_ef(graph, vectors, distance) if hasattr(graph, "hnsw") else None
            if ef_search is not None:
                times["efSearch calibration"] = lap()
        current = tmp / "bm25.*"
        texts_read = steps(texts, len(texts), "BM25 postings: documents")
        bm25_lib.save_postings(bm25_lib.build_postings(analyze(t) for t in texts_read), tmp)
        fields = sorted({key for m in metas if m != "{}" for key in json.loads(m)})
        times["postings"] = lap()
        files = {}
        current = tmp
        for file in SEGMENT_FILES:
            if file == FAISS_FILE and factory == BASE_FACTORY:
                continue
            fsync_path(tmp / file)
            files[file] = file_record(tmp / file)
        fsync_path(tmp)
        os.replace(tmp, segments_dir / name)
        fsync_path(segments_dir)
        times["fsync+crc32"] = lap()
        logger.info("segment %s: %d documents written in %.1f s: %s", name, len(ids), clock[-1][0] - clock[0][0],
                    ", ".join(f"{what} {spent}" for what, spent in times.items()))
    except BaseException as exc:
        refusal = write_refusal(exc, current, needed)  # before the removal: it looks at what was written
        shutil.rmtree(tmp, ignore_errors=True)
        if refusal is not None:
            raise refusal from exc
        raise
    entry = {"name": name, "count": len(ids), "deleted": 0, "deletions": None, "factory": factory,
             "fields": fields, "files": files, IDS_KEY: ids_checksum(ids)}
    if ef_search is not None:
        entry["ef_search"] = ef_search  # measured on this graph (vectors.calibrate_ef)
    return entry


def read_only_uri(path: Path) -> str:
    """A SQLite URI that opens ``path`` read-only and immutable. The path is absolute and
    percent-escaped: unescaped, a ``?`` or ``#`` in it ends the file name (SQLite then opens,
    or creates, another file) and a ``%41`` reads as ``A``."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode=ro&immutable=1"


def stored_rows(seg_dir: Path, columns: str) -> list[tuple]:
    """``columns`` of every row of the document store in ``seg_dir``, in row order (tombstoned
    rows included), read once without a ``Segment``; raises ``sqlite3.Error``."""
    db = sqlite3.connect(read_only_uri(seg_dir / DOCS_DB), uri=True)
    try:
        return db.execute(f"SELECT {columns} FROM docs ORDER BY pos").fetchall()
    finally:
        db.close()


def has_text_store(entry: dict[str, Any]) -> bool:
    """Whether the segment of ``entry`` was written with the text store (``textstore.py``)."""
    return TEXT_FILE in (entry.get("files") or {})


def write_ids(directory: Path, ids: Sequence[str]) -> None:
    """Write ``ids`` as ``directory``'s ids file (ASCII JSON: any id a document may have)."""
    # one string, then one write: json.dump to the file writes per token (0.4 s against 0.15 s at 1M ids)
    (directory / IDS_FILE).write_text(json.dumps(list(ids)), encoding="ascii")


def write_deletions(segment_dir: Path, generation: int, deleted: np.ndarray) -> dict[str, Any]:
    """Write the sorted deleted rows of a segment as ``deleted.<generation>.npy`` and its copy
    ``deleted.<generation>.copy.npy``; return the manifest record (the copy's under ``copy``).
    A new name per commit: the previous commit's files stay valid."""
    names = (f"deleted.{generation}.npy", f"deleted.{generation}.copy.npy")
    rows = np.asarray(deleted, dtype=np.int64)
    for name in names:
        tmp = segment_dir / f".{name}.tmp"
        try:
            with open(tmp, "wb") as fh:
                np.save(fh, rows, allow_pickle=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, segment_dir / name)
        except OSError as exc:
            refusal = write_refusal(exc, tmp, rows.nbytes + 128)
            tmp.unlink(missing_ok=True)
            if refusal is not None:
                raise refusal from exc
            raise
    fsync_path(segment_dir)
    return {"file": names[0], **file_record(segment_dir / names[0]),
            "copy": {"file": names[1], **file_record(segment_dir / names[1])}}


def read_faiss(handle: BinaryIO, crc32: int | None, index_path: Path, rel: str, fix: str, count: int, dim: int):
    """The FAISS index in the open file ``handle`` (a segment's or the vector base's), checked
    against ``crc32`` first (``None``: not recorded; a corrupt file can crash FAISS) and its
    vector count and dims after. ``rel`` names the file and ``fix`` the recovery in the
    one-line error."""
    faiss = require("faiss", feature="the local index")
    if crc32 is not None and checksum(handle) != crc32:
        raise damaged(index_path, f"{rel} has changed since it was written (CRC32 mismatch)", fix)
    try:
        index = faiss.read_index(faiss.PyCallbackIOReader(_PositionalReader(handle), 1 << 20))
    except (RuntimeError, OSError) as exc:
        raise damaged(index_path, f"{rel} cannot be read ({str(exc).splitlines()[0]})", fix) from None
    if index.ntotal != count or index.d != dim:
        raise damaged(index_path, f"{rel} holds {index.ntotal} vectors of {index.d} dims, expected {count} of {dim}",
                      fix)
    return index


def damaged(index_path: Path, problem: str, fix: str) -> IndexDamagedError:
    """The one-line error for a damaged index: what is wrong, how to see all, how to recover.
    ``problem`` and ``fix`` stay available as attributes (``index check`` lists them)."""
    error = IndexDamagedError(f"index {index_path} is damaged: {problem}. Fix: {fix} "
                              f"('hybrid-qpr index check {index_path}' lists every problem)")
    error.problem, error.fix = problem, fix
    return error


def fix_for(file: str, index_path: Path) -> str:
    """How to recover from a damaged ``file`` of a segment. Never the destructive
    ``--drop-damaged``: that is named only once ``optimize`` has confirmed the damage against
    the recorded checksums and found no intact copy to rebuild from (``lost_fix``)."""
    if file in (FAISS_FILE, *bm25_lib.FILES, *textstore.FILES):
        return (f"run 'hybrid-qpr index optimize {index_path}', which rebuilds this part from the segment's "
                "documents and vectors")
    if file == VECTORS:
        return (f"run 'hybrid-qpr index optimize {index_path}', which re-encodes the segment's texts with the "
                "index's model")
    if file == IDS_FILE:
        return f"run 'hybrid-qpr index optimize {index_path}', which rewrites it from docs.sqlite"
    if file.startswith("deleted."):
        return (f"run 'hybrid-qpr index optimize {index_path}', which rebuilds the tombstones from their other "
                "copy (or from the ids updated in other segments) and says what it cannot rebuild")
    return (f"run 'hybrid-qpr index optimize {index_path}', which rebuilds the segment's documents from their "
            "intact copies (docs.text and docs.ids.json) and says what it cannot rebuild")


def lost_fix(index_path: Path) -> str:
    """The fix for a segment whose documents or tombstones are confirmed damaged (size or
    CRC32 against the manifest) and cannot be rebuilt from an intact copy."""
    return (f"run 'hybrid-qpr index optimize {index_path} --drop-damaged', which lists what is lost, asks, and "
            f"moves the segment's files to {index_path / DAMAGED_DIR}; then re-ingest your source file (re-ingesting "
            "never duplicates)")


def ids_checksum(ids: Sequence[str]) -> int:
    """CRC32 of a segment's ids in row order (the manifest's ``ids_crc32``): what lets
    ``optimize`` trust the ids it reads from a damaged ``docs.sqlite``."""
    return zlib.crc32(json.dumps(list(ids), ensure_ascii=False).encode("utf-8"))


def expected_files(entry: dict[str, Any]) -> dict[str, dict[str, int]]:
    """File name -> {bytes, crc32} recorded at commit for a segment (tombstones included)."""
    files = dict(entry.get("files") or {})
    if entry.get("deletions"):
        for d in (entry["deletions"], entry["deletions"].get("copy")):
            if d:
                files[d["file"]] = {"bytes": d["bytes"], "crc32": d["crc32"]}
    return files


def file_problems(index_path: Path, entry: dict[str, Any], checksums: bool) -> list[tuple[str, str]]:
    """(problem, file) for every file of a segment that is missing, has another size than
    recorded or (with ``checksums``) another CRC32."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    rel = f"{SEGMENTS_DIR}/{entry['name']}"
    problems = []
    if not seg_dir.is_dir():
        return [(f"{rel}/ is missing", DOCS_DB)]
    for file, record in expected_files(entry).items():
        path = seg_dir / file
        if not path.is_file():
            problems.append((f"{rel}/{file} is missing", file))
            continue
        size = path.stat().st_size
        if size != record["bytes"]:
            how = "empty" if size == 0 else ("truncated" if size < record["bytes"] else "longer than written")
            problems.append((f"{rel}/{file} is {how} ({size} bytes, {record['bytes']} at commit)", file))
        elif checksums and checksum(path) != record["crc32"]:
            problems.append((f"{rel}/{file} has changed since it was written (CRC32 mismatch)", file))
    return problems


class Segment:
    """Read access to one committed segment. Opening checks every file's size, and the CRC32
    of the files in ``OPEN_VERIFIED``, against the manifest, and opens every file at once (the
    document store, the arrays, a handle on the FAISS part), so a later commit or merge that
    removes the files cannot pull them from under a reader; the FAISS part is read on first use.
    ``verify=False`` (a segment just written, or ``index check``, which checks everything
    itself) skips the checks."""

    def __init__(self, index_path: Path, entry: dict[str, Any], dim: int, search: SearchSettings, *,
                 verify: bool = True):
        self.index_path = index_path
        self.entry = entry
        self.name: str = entry["name"]
        self.count: int = int(entry["count"])
        self.dir = index_path / SEGMENTS_DIR / self.name
        self.dim = dim
        self.search = search
        if verify:
            for problem, file in file_problems(index_path, entry, checksums=False):
                raise damaged(index_path, problem, fix_for(file, index_path))
            self._verify(OPEN_VERIFIED + ((entry["deletions"]["file"],) if entry.get("deletions") else ()))
        self._vectors_verified = not verify  # the large files are checked on first use instead (see OPEN_VERIFIED)
        # every file is opened (or mapped) now: an open file outlives its unlink on POSIX, so a
        # later commit or merge that removes this segment cannot pull it from under the reader
        self._first_use = threading.Lock()  # the files checked or loaded on first use
        in_base = FAISS_FILE not in (entry.get("files") or {}) and entry.get("factory") == BASE_FACTORY
        self._faiss_file = None if in_base else self._load(FAISS_FILE, lambda p: open(p, "rb"))
        self._db: sqlite3.Connection | None = None
        try:
            self._open_rest(entry, dim)
        except BaseException:
            self.close()
            raise

    def _open_rest(self, entry: dict[str, Any], dim: int) -> None:
        index_path = self.index_path
        self._db = self._connect()
        self._vectors_file = self._load(VECTORS, lambda p: open(p, "rb"))
        self._vectors = self._load(VECTORS, lambda p: map_npy(self._vectors_file))
        if self._vectors.shape != (self.count, dim):
            raise damaged(index_path, f"{self.rel(VECTORS)} has shape {self._vectors.shape}, expected "
                          f"({self.count}, {dim})", fix_for(VECTORS, index_path))
        self.postings = self._load(bm25_lib.VOCAB, lambda p: bm25_lib.load_postings(p.parent))
        if len(self.postings.doc_len) != self.count:
            raise damaged(index_path, f"{self.rel(bm25_lib.DOCLEN)} holds {len(self.postings.doc_len)} lengths, "
                          f"expected {self.count}", fix_for(bm25_lib.DOCLEN, index_path))
        self.deleted: np.ndarray | None = None  # bool mask, None = nothing deleted
        deletions = entry.get("deletions")
        if deletions:
            rows = self._load(deletions["file"], load_npy)
            if rows.ndim != 1 or len(rows) != int(entry["deleted"]) or (len(rows) and (rows.min() < 0 or rows.max() >= self.count)):
                raise damaged(index_path, f"{self.rel(deletions['file'])} does not hold {entry['deleted']} rows "
                              f"below {self.count}", fix_for(DOCS_DB, index_path))
            self.deleted = np.zeros(self.count, dtype=bool)
            self.deleted[rows] = True
        self._faiss = None
        self._ids: np.ndarray | None = None
        self.texts: TextStore | None = None  # segments written before the text store have none
        self._texts_verified = self._vectors_verified
        if has_text_store(entry):
            self._text_file = self._load(TEXT_FILE, lambda p: open(p, "rb"))
            self._offsets_file = self._load(OFFSETS_FILE, lambda p: open(p, "rb"))
            offsets = self._load(OFFSETS_FILE, lambda p: map_npy(self._offsets_file))  # a bad header names this file
            self.texts = self._load(TEXT_FILE, lambda p: TextStore(self._text_file, offsets))

    # ------------------------------------------------------------------ checks
    def rel(self, file: str) -> str:
        return f"{SEGMENTS_DIR}/{self.name}/{file}"

    def _verify(self, files: Sequence[str]) -> None:
        """Compare ``files``' CRC32 with the manifest's (a same-size edit passes the size check)."""
        for file, record in expected_files(self.entry).items():
            # read through _load: a file a commit removed since its size was checked is then
            # IndexDamagedError, which refresh retries, not a bare FileNotFoundError
            if file in files and self._load(file, checksum) != record["crc32"]:
                raise damaged(self.index_path, f"{self.rel(file)} has changed since it was written (CRC32 mismatch)",
                              fix_for(file, self.index_path))

    @property
    def vectors(self) -> np.ndarray:
        """The stored vectors ``[count, dim]`` (memory-mapped), checked against their CRC32 on first use."""
        if not self._vectors_verified:
            with self._first_use:
                if not self._vectors_verified:
                    self._verify_held(VECTORS, self._vectors_file)
                self._vectors_verified = True
        return self._vectors

    def _verify_held(self, file: str, handle: BinaryIO) -> None:
        """Compare ``file``'s CRC32 with the manifest's, read through the ``handle`` held since
        open (its path may be gone by now): the first-use check of the large files."""
        record = (self.entry.get("files") or {}).get(file)
        if record and checksum(handle) != record["crc32"]:
            raise damaged(self.index_path, f"{self.rel(file)} has changed since it was written (CRC32 mismatch)",
                          fix_for(file, self.index_path))

    def _load(self, file: str, loader):
        try:
            return loader(self.dir / file)
        except PermissionError:
            raise access_refusal(self.dir / file, writing=False) from None
        except (OSError, ValueError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise damaged(self.index_path, f"{self.rel(file)} cannot be read ({exc})", fix_for(file, self.index_path)) from None

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(read_only_uri(self.dir / DOCS_DB), uri=True, check_same_thread=False)
            # pages read through a memory map, not a read() call each: fetching a result page's
            # documents at 1M documents in four segments 0.14-0.16 -> 0.10-0.11 ms (docs/search.md)
            db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            rows = db.execute("SELECT count(*) FROM docs").fetchone()[0]
        except sqlite3.Error as exc:
            if unreadable(self.dir / DOCS_DB):
                raise access_refusal(self.dir / DOCS_DB, writing=False) from None
            raise damaged(self.index_path, f"{self.rel(DOCS_DB)} is not a readable SQLite database ({exc})",
                          fix_for(DOCS_DB, self.index_path)) from None
        if rows != self.count:
            raise damaged(self.index_path, f"{self.rel(DOCS_DB)} holds {rows} rows, expected {self.count}",
                          fix_for(DOCS_DB, self.index_path))
        return db

    # ------------------------------------------------------------------ reads
    @property
    def live(self) -> int:
        return self.count - int(self.entry.get("deleted", 0))

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            return self._db.execute(query, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise damaged(self.index_path, f"{self.rel(DOCS_DB)} cannot be read ({exc})",
                          fix_for(DOCS_DB, self.index_path)) from None

    def ids_at(self, rows: np.ndarray) -> list[str]:
        """Ids of segment ``rows``, in that order. Every ranking needs ids (ties are broken by
        id and lists are fused by id), so the segment's ids are read once, on first use, and
        kept in memory (about 70 bytes per document) instead of one SQLite query per list."""
        if self._ids is None:
            ids = np.empty(self.count, dtype=object)
            ids[:] = [row[0] for row in self.sql("SELECT id FROM docs ORDER BY pos")]
            if len(ids) != self.count:
                raise damaged(self.index_path, f"{self.rel(DOCS_DB)} holds {len(ids)} ids, expected {self.count}",
                              fix_for(DOCS_DB, self.index_path))
            self._ids = ids
        return self._ids[np.asarray(rows, dtype=np.int64)].tolist()

    @property
    def faiss(self):
        if self._faiss is None:
            with self._first_use:  # reader threads may ask at once: load (and check) it once
                if self._faiss is None:
                    self._faiss = self._load_faiss()
        return self._faiss

    def _load_faiss(self):
        """Check ``vectors.faiss`` against its CRC32, then read it through the handle held since open."""
        record = (self.entry.get("files") or {}).get(FAISS_FILE)
        handle = self._faiss_file  # opened with the segment: the path may be gone by now
        if handle is None:
            raise damaged(self.index_path, f"segment {self.name} is searched through the vector base, which the "
                          "manifest does not name", f"run 'hybrid-qpr index optimize {self.index_path}'")
        index = read_faiss(handle, record["crc32"] if record else None, self.index_path, self.rel(FAISS_FILE),
                           fix_for(FAISS_FILE, self.index_path), self.count, self.dim)
        self.search.apply(index, self.entry.get("ef_search"))
        back_with_huge_pages(index)  # read to be searched (hugepages.py)
        return index

    def set_search(self, search: SearchSettings) -> None:
        if search != self.search:
            self.search = search
            if self._faiss is not None:
                search.apply(self._faiss, self.entry.get("ef_search"))

    @property
    def ef_search(self) -> int:
        """The efSearch this segment's HNSW graph is searched with."""
        return self.search.ef_for(self.entry.get("ef_search"), self.count)

    def lookup(self, ids: Sequence[str], columns: str = "id, pos") -> list[tuple]:
        """Rows of ``ids`` that are live in this segment (``columns`` selected)."""
        return self._live_rows("id", ids, columns)

    def documents_at(self, rows: Sequence[int]) -> list[tuple[str, str, str]]:
        """``(id, text, metadata JSON)`` of the live ``rows``: from the text store (checked on
        first use), or SQLite for a segment written without one."""
        if self.texts is None:
            return self.rows_at(rows, "id, text, metadata")
        if not self._texts_verified:
            self._verify_texts()
        if self.deleted is not None:
            rows = [row for row in rows if not self.deleted[row]]
        return [(doc_id, text, meta) for doc_id, (text, meta) in zip(self.ids_at(rows), self.texts.rows(rows))]

    def _verify_texts(self) -> None:
        with self._first_use:
            if self._texts_verified:
                return
            self._verify_held(TEXT_FILE, self._text_file)
            self._verify_held(OFFSETS_FILE, self._offsets_file)
            problem = self.texts.problem(self.count)
            if problem:
                raise damaged(self.index_path, f"{self.rel(OFFSETS_FILE)} {problem}", fix_for(OFFSETS_FILE, self.index_path))
            self._texts_verified = True

    def rows_at(self, rows: Sequence[int], columns: str) -> list[tuple]:
        """``columns`` of the live ``rows`` (read by SQLite rowid: cheaper than by id)."""
        return self._live_rows("pos", rows, columns)

    def _live_rows(self, key: str, values: Sequence[Any], columns: str) -> list[tuple]:
        out: list[tuple] = []
        for start in range(0, len(values), SQL_CHUNK):
            chunk = list(values[start:start + SQL_CHUNK])
            out.extend(self.sql(f"SELECT {columns}, pos FROM docs WHERE {key} IN ({', '.join('?' * len(chunk))})", chunk))
        if self.deleted is not None:
            out = [r for r in out if not self.deleted[r[-1]]]
        return [r[:-1] for r in out]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        if getattr(self, "texts", None) is not None:
            self.texts.close()
            self._text_file.close()
            self._offsets_file.close()
        if self._faiss_file is not None:
            self._faiss_file.close()
        if hasattr(self, "_vectors_file"):
            self._vectors_file.close()
