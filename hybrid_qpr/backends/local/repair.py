"""``hybrid-qpr index repair``: rebuild a damaged ``manifest.json`` from the segments it can verify.

The manifest is the only record of which segments a commit holds and of each file's size and
CRC32. Each commit also writes the same manifest as ``manifest.copy.json``. A manifest that
fails its checks (not JSON, a wrong type, its own CRC32) is rebuilt from the copy when the
copy is intact and not older than what is left of it, else from what is left of it, then
every segment entry is kept only if its files match the sizes and CRC32s it records and open
as that many rows of that many dims (``verify_entry``). Segments that do not are left out and
named; so is a vector base that does not verify (``index optimize`` rebuilds it). An intact
manifest whose copy is damaged, missing or stale gets the copy rewritten from it; an intact
manifest with an intact copy is left alone without taking the write lock (so a read-only
index is answered "nothing to repair").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid_qpr import artifacts
from hybrid_qpr.backends.local.commit import (CHECKSUM_KEY, FORMAT, MANIFEST, MANIFEST_COPY, READABLE_FORMAT_VERSIONS,
                                              WriteLock, entry_problem, manifest_problem, write_manifest)
from hybrid_qpr.backends.local.storage import write_refusal
from hybrid_qpr.backends.local.segment import SEGMENTS_DIR, Segment, file_problems
from hybrid_qpr.backends.local.vectorbase import BASE_KEY, base_problems
from hybrid_qpr.backends.local.vectors import SearchSettings
from hybrid_qpr.errors import IndexDamagedError, IndexStorageError


@dataclass
class RepairReport:
    path: Path
    repaired: bool = False  # False: the manifest was intact, nothing written
    source: str = ""  # what the new manifest was rebuilt from
    kept: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "segments/<name>: why"
    documents: int = 0
    copy_rewritten: str = ""  # why manifest.copy.json was rewritten from an intact manifest.json ("": it was not)


def _load(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` when there is none to read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _usable(manifest: dict[str, Any] | None) -> bool:
    """Whether ``manifest`` has the sections a rebuild keeps (format, model, faiss, segments)."""
    return (manifest is not None and manifest.get("format") == FORMAT
            and manifest.get("format_version") in READABLE_FORMAT_VERSIONS
            and manifest_problem({**manifest, "segments": [], CHECKSUM_KEY: None}) is None)


def _intact(manifest: dict[str, Any] | None) -> bool:
    return manifest is not None and manifest_problem(manifest) is None and _usable(manifest)


def copy_problem(path: Path, manifest: dict[str, Any]) -> tuple[str, bool] | None:
    """What is wrong with the manifest copy of the index at ``path``, whose intact manifest is
    ``manifest``: ``(why, stale)``, ``why`` to follow the copy's name ("is missing"), ``stale``
    when it is only an intact copy of an earlier commit (a commit interrupted between writing
    the two); ``None`` when it is a copy of ``manifest``."""
    copy_path = path / MANIFEST_COPY
    if not copy_path.is_file():
        return "is missing", False
    copy = _load(copy_path)
    if copy == manifest:
        return None
    if copy is None:
        return "is not valid JSON", False
    if not _intact(copy):
        return manifest_problem(copy) or f"is not a {FORMAT} manifest", False
    if _generation(copy) < _generation(manifest):
        return f"is of commit {_generation(copy)}, {MANIFEST} of commit {_generation(manifest)}", True
    return f"differs from {MANIFEST} (commit {_generation(manifest)})", False


def copy_fix(path: Path) -> str:
    return f"run 'hybrid-qpr index repair {path}', which rewrites it from {MANIFEST}"


def _generation(manifest: dict[str, Any]) -> int:
    value = manifest.get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def verify_entry(path: Path, entry: Any, dim: int, search: SearchSettings) -> str | None:
    """Why the segment ``entry`` cannot be kept (``None``: every file matches its record and it
    opens as ``count`` rows of ``dim`` dims with its tombstones)."""
    problem = entry_problem(entry)
    if problem:
        return f"its manifest entry {problem}"
    problems = file_problems(path, entry, checksums=True)
    if problems:
        return problems[0][0]
    try:
        Segment(path, entry, dim, search, verify=False).close()
    except (IndexDamagedError, IndexStorageError) as exc:
        return getattr(exc, "problem", str(exc))
    return None


def repair_index(path: str | Path) -> RepairReport:
    """Rebuild the manifest of the index at ``path`` when it fails its checks (under the write
    lock). Raises ``IndexDamagedError`` when neither it nor its copy holds the index's model
    and search sections."""
    path = Path(path)
    report = RepairReport(path)
    current = _load(path / MANIFEST)
    if _intact(current) and copy_problem(path, current) is None:
        return report  # intact, and so is its copy: nothing to do, no lock needed (a read-only index)
    with WriteLock(path).held():
        current, copy = _load(path / MANIFEST), _load(path / MANIFEST_COPY)
        if _intact(current):
            problem = copy_problem(path, current)
            if problem is not None:
                _rewrite_copy(path, current)
                report.repaired, report.copy_rewritten = True, problem[0]
                report.documents = int(current.get("count", 0))
            return report
        copy_ok = copy is not None and _usable(copy) and manifest_problem(copy) is None
        if copy_ok and (not _usable(current) or _generation(copy) >= _generation(current)):
            base, report.source = copy, f"{MANIFEST_COPY} (commit {_generation(copy)})"
        elif _usable(current):
            base, report.source = current, f"what is readable of {MANIFEST}"
        else:
            raise IndexDamagedError(
                f"index {path} cannot be repaired: neither {MANIFEST} nor {MANIFEST_COPY} holds its model and search "
                "settings. Fix: ingest your source file into a new --index directory")
        dim = int(base["model"]["dim"])
        search = SearchSettings.from_manifest(base["faiss"])
        entries = base["segments"] if isinstance(base.get("segments"), list) else []
        kept, named = [], set()
        for entry in entries:
            why = verify_entry(path, entry, dim, search)
            name = entry.get("name") if isinstance(entry, dict) else None
            named.add(f"{SEGMENTS_DIR}/{name}")
            if why is None:
                kept.append(entry)
                report.kept.append(f"{SEGMENTS_DIR}/{name}")
            else:
                report.left_out.append(f"{SEGMENTS_DIR}/{name}: {why}")
        manifest = {**base, "segments": kept, "retained": [],
                    "count": sum(int(e["count"]) - int(e.get("deleted", 0)) for e in kept),
                    "generation": max(_generation(base), _generation(current or {})) + 1}
        manifest.pop(CHECKSUM_KEY, None)
        if manifest.get(BASE_KEY):
            named.add(f"{SEGMENTS_DIR}/{manifest[BASE_KEY]['name']}")
            problems = base_problems(path, manifest, checksums=True)
            if problems:
                report.left_out.append(f"the vector base: {problems[0]} ('hybrid-qpr index optimize {path}' "
                                       "rebuilds it)")
                manifest[BASE_KEY] = None
        segments_dir = path / SEGMENTS_DIR
        if segments_dir.is_dir():
            report.left_out += [f"{SEGMENTS_DIR}/{child.name}: not named by {report.source}" for child in
                                sorted(segments_dir.iterdir()) if child.is_dir() and not child.name.startswith(".")
                                and f"{SEGMENTS_DIR}/{child.name}" not in named]
        write_manifest(path, manifest)
        report.repaired, report.documents = True, manifest["count"]
    return report


def _rewrite_copy(path: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` (intact, signed) as the index's manifest copy."""
    try:
        artifacts.write_json(path / MANIFEST_COPY, manifest)
    except OSError as exc:
        refusal = write_refusal(exc, path / MANIFEST_COPY, len(json.dumps(manifest, indent=2)))
        if refusal is not None:
            raise refusal from exc
        raise
