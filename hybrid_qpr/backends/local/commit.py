"""The commit point of a local index (``manifest.json``), the writer lock, and the removal
of what dead writers left behind.

Commit protocol (Lucene's ``segments_N`` idea in plain files):

1. a writer takes the exclusive lock ``write.lock`` (``fcntl.flock``; the kernel drops it
   when the process dies, even by SIGKILL) and re-reads the manifest;
2. new segments and tombstone files are written under new names and fsynced;
3. the new manifest is written to a temporary file, fsynced and renamed over
   ``manifest.json``: that rename is the commit. A writer killed before it leaves the
   previous commit intact; after it, the new one.

Files the new commit no longer uses are kept for one more commit (listed under
``retained``) and deleted by the commit after. A reader that opened an older commit keeps
reading it: its segments hold their files open (see ``segment.py``), and a reader that finds
a file gone while opening a commit opens the newer one (``LocalIndex.refresh``). The
manifest carries a CRC32 of its own content (``manifest_crc32``) and its types are checked
before use (``manifest_problem``). Anything else in ``segments/`` that the manifest does not name
was left by a dead writer and is removed the next time the index is opened while no
writer holds the lock. Readers never take the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hybrid_qpr import artifacts
from hybrid_qpr.backends.local.segment import DAMAGED_DIR, SEGMENTS_DIR, fsync_path
from hybrid_qpr.backends.local.storage import access_refusal, write_refusal
from hybrid_qpr.errors import ArtifactError, IndexDamagedError, IndexLockedError, IndexStorageError

logger = logging.getLogger(__name__)

FORMAT = "hybrid-qpr-local-index"
FORMAT_VERSION = 3  # what a commit writes
# 3: the vector base may store its graph in locality order (order.npy), which a reader of 2
# would misread as node order, so a version-2 reader refuses it; version 2 reads as before
READABLE_FORMAT_VERSIONS = (2, 3)
MANIFEST, LOCK_FILE = "manifest.json", "write.lock"
# a second copy of each commit's manifest, written after the commit: what 'index repair' rebuilds
# a damaged manifest.json from (each segment it names verified against its files first)
MANIFEST_COPY = "manifest.copy.json"
REQUIRED_MODEL_KEYS = ("fingerprint", "dim", "distance")
# the manifest's CRC32 of itself (written at every commit; a manifest written before it existed has none)
CHECKSUM_KEY = "manifest_crc32"
SEGMENT_NAME = re.compile(r"s\d{6,}-[0-9a-f]+")  # what LocalIndex.write_new_segment names a segment: never a path
TOMBSTONE_NAME = re.compile(r"deleted\.\d+\.npy")
TOMBSTONE_COPY_NAME = re.compile(r"deleted\.\d+\.copy\.npy")  # the second copy of a tombstone file
GRACE_S = 2.0  # even without --wait, a writer waits this long: a reader's cleanup holds the lock for a moment


def repair_fix(path: Path) -> str:
    """The fix for a damaged manifest: ``index repair`` rebuilds it from the segments it can verify."""
    return (f"run 'hybrid-qpr index repair {path}', which rebuilds {MANIFEST} from the segments it can verify "
            "against their checksums and says what it could not")


def read_manifest(path: Path) -> dict[str, Any]:
    """The committed manifest of the index at ``path``, checked for the keys every reader needs."""
    try:
        manifest = artifacts.read_manifest(
            path / MANIFEST, FORMAT, READABLE_FORMAT_VERSIONS, what="hybrid-qpr local index",
            missing=(f"index {path} is damaged: {MANIFEST} is missing. Fix: {repair_fix(path)}"
                     if (path / MANIFEST_COPY).is_file() else not_an_index(path)),
            fix=repair_fix(path))
    except PermissionError as exc:
        raise access_refusal(Path(exc.filename or path / MANIFEST), writing=False) from None
    except ArtifactError as exc:
        if isinstance(exc.__cause__, ValueError):  # not JSON, or not UTF-8: damage, which 'index repair' mends
            raise _damaged_manifest(path, f"is not valid JSON ({exc.__cause__})") from None
        raise
    problem = manifest_problem(manifest)
    if problem:
        raise _damaged_manifest(path, problem)
    return manifest


def _damaged_manifest(path: Path, problem: str) -> IndexDamagedError:
    return IndexDamagedError(f"index {path} is damaged: {MANIFEST} {problem}. Fix: {repair_fix(path)} "
                             f"('hybrid-qpr index check {path}' lists every problem)")


def holds_other_files(path: Path) -> bool:
    """True when the directory ``path`` holds files no index writer left there (an ingest
    refuses to write into it)."""
    return path.is_dir() and bool({p.name for p in path.iterdir()} - {LOCK_FILE, SEGMENTS_DIR, MANIFEST_COPY, DAMAGED_DIR})


def not_an_index(path: Path) -> str:
    """Why ``path`` cannot be read as an index, with advice that works for what is there."""
    if holds_other_files(path):
        return (f"{path}: not a hybrid-qpr index (no {MANIFEST}) and it holds other files, so an ingest will not "
                f"write there either; build the index in a new directory: 'hybrid-qpr ingest FILE --index NEW_DIR'")
    if path.exists():
        return f"{path}: not a hybrid-qpr index (no {MANIFEST} yet); build one with 'hybrid-qpr ingest FILE --index {path}'"
    return (f"{path}: not a hybrid-qpr index (no such directory); build one with 'hybrid-qpr ingest FILE --index "
            f"{path}' (a cluster index? add --opensearch or --elasticsearch)")


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """What a reader would trip over in ``manifest`` (a missing key, a value of the wrong
    type, an edit since its commit), or ``None``."""
    model = manifest.get("model")
    if not isinstance(model, dict):
        return "has no 'model' section"
    missing = [k for k in REQUIRED_MODEL_KEYS if k not in model]
    if missing:
        return f"'model' lacks {', '.join(missing)}"
    if not _whole(model["dim"], 1):
        return f"'model' has dim={model['dim']!r}, not a whole number >= 1"
    for key in ("count", "generation", "next_segment"):
        if key in manifest and not _whole(manifest[key]):
            return f"has {key}={manifest[key]!r}, not a whole number >= 0"
    if not isinstance(manifest.get("segments"), list):
        return "has no 'segments' list"
    for i, entry in enumerate(manifest["segments"]):
        problem = entry_problem(entry)
        if problem:
            return f"segment entry {i} {problem}"
    if not isinstance(manifest.get("faiss"), dict):
        return "has no 'faiss' section"
    if not _ef_ok(manifest["faiss"].get("ef_search")):
        return f"'faiss' has ef_search={manifest['faiss']['ef_search']!r}, not a whole number >= 1"
    if not isinstance(manifest.get("retained", []), list) or not all(isinstance(r, str) for r in manifest.get("retained", [])):
        return "has a 'retained' entry that is not a path"
    stored = manifest.get(CHECKSUM_KEY)
    if stored is not None and stored != manifest_checksum(manifest):
        return ("has changed since it was committed (its checksum does not match: a segment or tombstone entry may "
                "be lost or edited)")
    return None


def entry_problem(entry: Any) -> str | None:
    """What is wrong with one segment entry of the manifest, or ``None``."""
    if not isinstance(entry, dict) or not {"name", "count", "files"} <= set(entry):
        return "lacks name, count or files"
    if not isinstance(entry["name"], str) or not SEGMENT_NAME.fullmatch(entry["name"]):
        return f"has name={entry['name']!r}, not a segment name"
    for key in ("count", "deleted", "ids_crc32"):
        if not _whole(entry.get(key, 0)):
            return f"has {key}={entry.get(key)!r}, not a whole number >= 0"
    if int(entry.get("deleted", 0)) > int(entry["count"]):
        return f"has more deleted rows ({entry['deleted']}) than rows ({entry['count']})"
    records = dict(entry["files"]) if isinstance(entry["files"], dict) else None
    deletions = entry.get("deletions")
    if deletions is not None:
        if not isinstance(deletions, dict) or not isinstance(deletions.get("file"), str) \
                or not TOMBSTONE_NAME.fullmatch(deletions["file"]):
            return f"has deletions={deletions!r}, not a tombstone file record"
        copy = deletions.get("copy")
        if copy is not None and (not isinstance(copy, dict) or not isinstance(copy.get("file"), str)
                                 or not TOMBSTONE_COPY_NAME.fullmatch(copy["file"])):
            return f"has a tombstone copy {copy!r}, not a tombstone file record"
        if records is not None:
            records[deletions["file"]] = deletions
            if copy is not None:
                records[copy["file"]] = copy
    if records is None:
        return "has files that are not a mapping"
    for file, record in records.items():
        if not isinstance(record, dict) or not _whole(record.get("bytes")) or not _whole(record.get("crc32")):
            return f"has a record for {file!r} without whole-number bytes and crc32"
    if not _ef_ok(entry.get("ef_search")):
        return f"has ef_search={entry['ef_search']!r}, not a whole number >= 1"
    return None


def _whole(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _ef_ok(value: Any) -> bool:
    """An efSearch as stored: absent/null (calibrated or default) or a whole number >= 1."""
    return value is None or _whole(value, 1)


def manifest_checksum(manifest: dict[str, Any]) -> int:
    """CRC32 of the manifest's content (every key but the checksum itself, in canonical JSON)."""
    body = {key: value for key, value in manifest.items() if key != CHECKSUM_KEY}
    return zlib.crc32(json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Commit: write the manifest aside (fsynced, with its own checksum), rename it over
    ``manifest.json``, fsync the directory."""
    signed = {**manifest, CHECKSUM_KEY: manifest_checksum(manifest)}
    try:
        artifacts.write_json(path / MANIFEST, signed)
        fsync_path(path)
    except OSError as exc:
        refusal = write_refusal(exc, path / MANIFEST, len(json.dumps(manifest, indent=2)))
        if refusal is not None:
            raise refusal from exc
        raise
    try:  # committed already: a copy that could not be written costs only the repair source
        artifacts.write_json(path / MANIFEST_COPY, signed)
    except OSError as exc:
        logger.warning("%s: could not write %s (%s)", path, MANIFEST_COPY, exc)


def referenced(manifest: dict[str, Any]) -> set[str]:
    """Paths (relative to the index) that ``manifest`` uses: segment directories, tombstone
    files and the vector base's directory."""
    out = set()
    if manifest.get("vector_base"):
        out.add(f"{SEGMENTS_DIR}/{manifest['vector_base']['name']}")
    for entry in manifest.get("segments", []):
        out.add(f"{SEGMENTS_DIR}/{entry['name']}")
        if entry.get("deletions"):
            out.add(f"{SEGMENTS_DIR}/{entry['name']}/{entry['deletions']['file']}")
            if entry["deletions"].get("copy"):
                out.add(f"{SEGMENTS_DIR}/{entry['name']}/{entry['deletions']['copy']['file']}")
    return out


def remove_unreferenced(path: Path, manifest: dict[str, Any]) -> list[str]:
    """Delete what neither the commit nor its ``retained`` list names (dead writers' leftovers:
    temporary segment directories, uncommitted segments, stale tombstones and manifests).
    Only call while holding the write lock. Returns the removed paths."""
    keep = referenced(manifest) | set(manifest.get("retained", []))
    removed = []
    for stale in [*path.glob(f".{MANIFEST}.*.tmp"), *path.glob(f".{MANIFEST_COPY}.*.tmp")]:
        stale.unlink(missing_ok=True)
        removed.append(stale.name)
    segments = path / SEGMENTS_DIR
    if segments.is_symlink() or not segments.is_dir():
        return removed  # never delete through a link out of the index (writers refuse one: links_in)
    for child in segments.iterdir():
        rel = f"{SEGMENTS_DIR}/{child.name}"
        if child.is_symlink():
            continue
        if rel not in keep:
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
            removed.append(rel)
            continue
        for file in child.iterdir():
            if (file.name.startswith("deleted.") or file.name.startswith(".")) and f"{rel}/{file.name}" not in keep \
                    and not file.is_symlink():
                shutil.rmtree(file, ignore_errors=True) if file.is_dir() else file.unlink(missing_ok=True)
                removed.append(f"{rel}/{file.name}")
    if removed:
        logger.info("%s: removed %d leftovers of interrupted writers", path, len(removed))
    return removed


def remove_paths(path: Path, rels: list[str]) -> None:
    for rel in rels:
        target = path / rel
        if _through_link(path, rel):
            continue  # never delete through a link out of the index
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def _through_link(path: Path, rel: str) -> bool:
    """True when ``path/rel`` or a folder between the index and it is a symbolic link."""
    target = path
    for part in Path(rel).parts:
        target = target / part
        if target.is_symlink():
            return True
    return False


def links_in(path: Path) -> list[str]:
    """The paths (relative to the index ``path``) that are symbolic links: its own files,
    ``segments/``, each entry of it and each file of a segment. A writer refuses to start while
    there is one, since writing, truncating or deleting through it would change files outside
    the index. (The index directory itself may be a link: that is where the user keeps it.)"""
    found = [name for name in (LOCK_FILE, MANIFEST, MANIFEST_COPY, SEGMENTS_DIR) if (path / name).is_symlink()]
    segments = path / SEGMENTS_DIR
    if SEGMENTS_DIR in found or not segments.is_dir():
        return found
    for child in sorted(segments.iterdir()):
        if child.is_symlink():
            found.append(f"{SEGMENTS_DIR}/{child.name}")
        elif child.is_dir():
            try:
                found += [f"{SEGMENTS_DIR}/{child.name}/{f.name}" for f in sorted(child.iterdir()) if f.is_symlink()]
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed meanwhile (a reader looks without the lock)
    return found


def refuse_links(path: Path) -> None:
    """Raise ``IndexStorageError`` when the index at ``path`` holds a symbolic link (``links_in``)."""
    links = links_in(path)
    if links:
        first = path / links[0]
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        problem = (f"{first} is a symbolic link (to {os.readlink(first)}){more}; a writer never writes, truncates "
                   "or deletes through a link, since that would change files outside the index, so nothing was written")
        raise IndexStorageError(f"index {path}: {problem}", problem=problem,
                                fix=f"replace each link by a copy of what it points to, or copy the whole index "
                                    f"with 'cp -rL {path} NEW_DIR' and write to the copy")


def _own_file(fd: int) -> bool:
    """True when ``fd`` is a regular file with no other name (a hard link to a user's file would
    otherwise be truncated by the writer's pid)."""
    info = os.fstat(fd)
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


class WriteLock:
    """The index's single-writer lock (an ``fcntl.flock`` on ``write.lock``, which also
    records the holder's pid for the "being written by pid N" message)."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self, wait: bool | float = False) -> None:
        """Take the lock. ``wait=False`` fails if another process still holds it after
        ``GRACE_S``; ``True`` waits as long as needed; a number waits that many seconds at most."""
        try:  # O_NOFOLLOW: a write.lock that is a symbolic link is never followed, created or truncated
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:  # a read-only mount or an index directory this user may not write
            if exc.errno == errno.ELOOP:
                refuse_links(self.path)
            refusal = write_refusal(exc, self.path / LOCK_FILE)
            if refusal is not None:
                raise refusal from exc
            raise
        if not _own_file(fd):
            os.close(fd)
            problem = (f"{self.path / LOCK_FILE} is not a plain file of the index alone (another name links to the "
                       "same file, or it is not a regular file), so it is not truncated and nothing was written")
            raise IndexStorageError(f"index {self.path}: {problem}", problem=problem,
                                    fix=f"while no writer is at work ('hybrid-qpr index check {self.path}' names "
                                        f"one), remove {self.path / LOCK_FILE}; the next writer makes a new one")
        deadline = None if wait is True else time.monotonic() + max(float(wait or 0), GRACE_S)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait is True else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    holder = self.holder(fd)
                    os.close(fd)
                    raise IndexLockedError(
                        f"index {self.path} is being written by {holder}; one writer at a time. Fix: wait for it to "
                        "finish, or pass --wait to queue behind it") from None
                time.sleep(0.05)
        try:  # under the lock: no writer is renaming or deleting segments while they are looked at
            refuse_links(self.path)
        except IndexStorageError:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    @staticmethod
    def holder(fd: int) -> str:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return f"pid {text}" if text.isdigit() else "another process"

    def writer_at_work(self) -> str | None:
        """Who holds the lock right now ("pid N"), or ``None``. Probed with a shared lock,
        which a read-only open allows: on a read-only mount the pid in the file is stale."""
        try:
            fd = os.open(self.path / LOCK_FILE, os.O_RDONLY)
        except OSError:
            return None  # no lock file (never written) or unreadable: no writer can hold it through this path
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            return self.holder(fd)
        finally:
            os.close(fd)

    def try_acquire(self) -> bool:
        """Take the lock only if it is free right now (for the cleanup done by readers)."""
        try:
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError:
            return False  # read-only index directory (or a linked write.lock): the cleanup is left to a writer
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        if links_in(self.path):  # the cleanup never deletes through a link; a writer names the link
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @contextlib.contextmanager
    def held(self, wait: bool | float = False) -> Iterator[None]:
        self.acquire(wait)
        try:
            yield
        finally:
            self.release()
