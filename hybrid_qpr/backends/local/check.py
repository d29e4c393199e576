"""``hybrid-qpr index check``: verify every file of a local index against its manifest.

Opening an index checks only what is cheap (file sizes, row counts, array shapes); the
check reads everything: each file's CRC32 against the one recorded at commit, the SQLite
integrity check, the FAISS index (vector count and dims), the BM25 postings and the
tombstones, the live count, that no id is live twice, and what dead writers left behind.
Each problem comes with its recovery.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_qpr.backends.local.commit import (FORMAT, MANIFEST, MANIFEST_COPY, READABLE_FORMAT_VERSIONS, WriteLock,
                                              links_in, manifest_problem, referenced, repair_fix)
from hybrid_qpr.backends.local.repair import copy_fix, copy_problem
from hybrid_qpr.backends.local.storage import access_refusal
from hybrid_qpr.backends.local.segment import BASE_FACTORY, DOCS_DB, SEGMENTS_DIR, Segment, file_problems, fix_for
from hybrid_qpr.backends.local.textstore import OFFSETS_FILE
from hybrid_qpr.backends.local.vectorbase import (BASE_KEY, GRAPH_FILE, base_fix, base_nodes, base_problems, read_graph,
                                                   read_order)
from hybrid_qpr.backends.local.vectors import SearchSettings
from hybrid_qpr.errors import IndexDamagedError, IndexStorageError

REBUILD = "the index cannot be used; ingest your source file into a new --index directory"


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str


@dataclass
class CheckReport:
    path: Path
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not errors: leftovers, a writer at work
    documents: int = 0
    segments: int = 0
    generation: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def check_index(path: str | Path) -> CheckReport:
    """Verify the index at ``path`` (read-only; takes no lock)."""
    path = Path(path)
    report = CheckReport(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file() and (path / MANIFEST_COPY).is_file():
        report.problems.append(Problem(f"{MANIFEST} is missing", repair_fix(path)))
        return report
    if not manifest_path.is_file():
        report.problems.append(Problem(f"{MANIFEST} is missing: not a hybrid-qpr index (or its first ingest never "
                                       "committed)", f"ingest your source file: hybrid-qpr ingest FILE --index {path}"))
        return report
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except PermissionError:
        refusal = access_refusal(manifest_path, writing=False)
        report.problems.append(Problem(refusal.problem, refusal.fix))
        return report
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        report.problems.append(Problem(f"{MANIFEST} is not valid JSON ({exc})", repair_fix(path)))
        return report
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("format_version") not in READABLE_FORMAT_VERSIONS:
        report.problems.append(Problem(f"{MANIFEST} is not a format {' or '.join(map(str, READABLE_FORMAT_VERSIONS))} "
                                       f"{FORMAT} manifest", repair_fix(path)))
        return report
    problem = manifest_problem(manifest)
    if problem:
        report.problems.append(Problem(f"{MANIFEST} {problem}", repair_fix(path)))
        return report
    report.generation = int(manifest.get("generation", 0))
    report.segments = len(manifest["segments"])
    dim = int(manifest["model"]["dim"])
    search = SearchSettings.from_manifest(manifest["faiss"])
    live_ids: set[str] = set()
    duplicates = 0
    for entry in manifest["segments"]:
        try:
            problems = file_problems(path, entry, checksums=True)
        except PermissionError as exc:  # not damage: say who may read it, never "drop the segment"
            refusal = access_refusal(Path(exc.filename or path), writing=False)
            report.problems.append(Problem(refusal.problem, refusal.fix))
            continue
        for what, file in problems:
            report.problems.append(Problem(what, fix_for(file, path)))
        if problems:
            continue
        try:
            seg = Segment(path, entry, dim, search, verify=False)
            try:
                quick = seg.sql("PRAGMA quick_check")
                if quick != [("ok",)]:
                    report.problems.append(Problem(f"{seg.rel(DOCS_DB)} fails SQLite's integrity check "
                                                   f"({quick[0][0]})", fix_for(DOCS_DB, path)))
                if seg.entry.get("factory") != BASE_FACTORY:  # base segments: the base is checked below
                    seg.faiss  # noqa: B018  (reading it checks vector count and dims)
                _check_postings(seg, report, path)
                if seg.texts is not None and (problem := seg.texts.problem(seg.count)):
                    report.problems.append(Problem(f"{seg.rel(OFFSETS_FILE)} {problem}", fix_for(OFFSETS_FILE, path)))
                rows = [r[0] for r in seg.sql("SELECT id FROM docs ORDER BY pos")]
                live = rows if seg.deleted is None else [i for i, d in zip(rows, seg.deleted) if not d]
                duplicates += len(live_ids.intersection(live))
                live_ids.update(live)
                report.documents += seg.live
            finally:
                seg.close()
        except (IndexDamagedError, IndexStorageError) as exc:
            report.problems.append(Problem(getattr(exc, "problem", str(exc)), getattr(exc, "fix", REBUILD)))
    _check_base(path, manifest, report)
    copy = copy_problem(path, manifest)
    if copy is not None:
        why, stale = copy
        if stale:  # an interrupted commit: the next commit rewrites it, and repair does now
            report.notes.append(f"{MANIFEST_COPY} {why} ({copy_fix(path)})")
        else:
            report.problems.append(Problem(f"{MANIFEST_COPY} (the copy 'index repair' rebuilds a damaged {MANIFEST} "
                                           f"from) {why}", copy_fix(path)))
    if duplicates:
        report.problems.append(Problem(f"{duplicates} ids are live in more than one segment",
                                       f"run 'hybrid-qpr index optimize {path}'"))
    if not report.problems and int(manifest.get("count", -1)) != report.documents:
        report.problems.append(Problem(f"{MANIFEST} says {manifest.get('count')} documents but the segments hold "
                                       f"{report.documents}", f"run 'hybrid-qpr index optimize {path}'"))
    _notes(path, manifest, report)
    return report


def _check_base(path: Path, manifest: dict, report: CheckReport) -> None:
    """The vector base: its record, files' sizes and CRC32s, then its node count and dims and its node order."""
    problems = base_problems(path, manifest, checksums=True)
    record = manifest.get(BASE_KEY)
    if not problems and record:
        try:
            with open(path / SEGMENTS_DIR / record["name"] / GRAPH_FILE, "rb") as handle:
                read_graph(handle, record, path, int(manifest["model"]["dim"]), base_nodes(record))
            read_order(path, record)
        except IndexDamagedError as exc:
            problems = [exc.problem]
    report.problems.extend(Problem(problem, base_fix(path)) for problem in problems)


def _check_postings(seg: Segment, report: CheckReport, path: Path) -> None:
    p = seg.postings
    bad = None
    if len(p.ptr) != len(p.vocab) + 1 or int(p.ptr[0]) != 0 or int(p.ptr[-1]) != len(p.rows) or len(p.rows) != len(p.tf):
        bad = "the postings arrays do not fit together"
    elif len(p.rows) and (int(p.rows.min()) < 0 or int(p.rows.max()) >= seg.count):
        bad = "a posting names a row outside the segment"
    if bad:
        report.problems.append(Problem(f"{seg.rel('bm25.*')}: {bad}", fix_for("bm25.tf.npy", path)))


def _notes(path: Path, manifest: dict, report: CheckReport) -> None:
    from hybrid_qpr.backends.local.index import migrate_command
    from hybrid_qpr.errors import ConfigError
    from hybrid_qpr.text.analysis import Analyzer, legacy_note

    try:
        if Analyzer.from_record(manifest.get("bm25", {}).get("analyzer"), f"index {path}").legacy:
            report.notes.append(legacy_note(f"index {path}", migrate_command(path)))
    except ConfigError as exc:
        report.problems.append(Problem(f"{MANIFEST}: {exc}", "use the hybrid-qpr version that wrote the index"))
    writer = WriteLock(path).writer_at_work()
    if writer:
        report.notes.append(f"the index is being written by {writer} right now")
    links = links_in(path)
    if links:
        report.notes.append(f"{', '.join(links[:5])}{' ...' if len(links) > 5 else ''}: symbolic link(s); queries read "
                            "through them, but every write to this index is refused until they are replaced by copies")
    keep = referenced(manifest) | set(manifest.get("retained", []))
    segments = path / SEGMENTS_DIR
    if segments.is_dir():
        for child in sorted(segments.iterdir()):
            rel = f"{SEGMENTS_DIR}/{child.name}"
            if rel not in keep:
                report.notes.append(f"{rel} is not committed yet ({writer} is writing it)" if writer else
                                    f"{rel} is left over from an interrupted writer (removed at the next open)")
