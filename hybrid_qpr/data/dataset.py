"""Build a dataset directory from a pair file or a QA log, and read its statistics.

Layout written (atomically: built beside ``out`` and swapped in)::

    out/train.jsonl  val.jsonl  test.jsonl   one cluster per line {"id", "questions": [{"id", "text"}]}
    out/manifest.json                        source, options, every count, file hashes, fingerprint
    out/beir/corpus.jsonl  queries.jsonl  qrels/val.tsv  qrels/test.tsv

The manifest ``fingerprint`` (16 hex of sha256 over the three split files) identifies the
training data; trainers copy it into the model's ``config.json``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid_qpr.artifacts import atomic_directory, display_name, read_manifest, write_json
from hybrid_qpr.data.beir import write_beir
from hybrid_qpr.data.clusters import Cluster, KeyMode, clusters_from_pairs, clusters_from_qa_log
from hybrid_qpr.data.pairs import iter_pairs
from hybrid_qpr.data.splits import DEFAULT_FRACTIONS, SPLITS, load_split, split_clusters, split_summary, write_split
from hybrid_qpr.errors import BadLines, OnBadLine

log = logging.getLogger(__name__)

FORMAT = "hybrid-qpr-dataset"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SKIP_HINT = "use --on-bad-line skip to skip and list such lines"  # what a strict dataset build adds to a bad line's error


@dataclass
class DatasetReport:
    """Everything ``hybrid-qpr dataset build|from-qa-log|stats`` prints; also the manifest body."""

    out: str
    source: dict[str, Any]
    options: dict[str, Any]
    reading: dict[str, Any]  # rows read, bad lines skipped (SkippedLine.to_dict records)
    grouping: dict[str, Any]  # clustering or QA-log coherence counts
    split: dict[str, Any]  # removal counts per split
    summary: dict[str, dict] = field(default_factory=dict)  # per split: clusters, questions, sizes
    beir: dict[str, int] = field(default_factory=dict)
    files: dict[str, dict] = field(default_factory=dict)
    fingerprint: str = ""
    seconds: float = 0.0
    modified: list[str] = field(default_factory=list)  # stats only: split files whose sha256 differs from the manifest

    def manifest(self) -> dict:
        from hybrid_qpr import __version__

        body = {k: v for k, v in self.__dict__.items() if k not in ("out", "modified")}
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "created_by": f"hybrid-qpr {__version__}",
                "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **body}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def splits_fingerprint(file_hashes: Iterable[str]) -> str:
    """16 hex of sha256 over the split files' hashes (train, val, test order): the dataset's
    fingerprint, which a model config records to name its training data."""
    digest = hashlib.sha256()
    for sha in file_hashes:
        digest.update(sha.encode())
    return digest.hexdigest()[:16]


def source_record(path: str | Path, kind: str) -> dict[str, Any]:
    p = Path(str(path))
    if str(path) == "-":
        return {"path": "-", "kind": kind, "sha256": None}
    return {"path": str(p.resolve()), "kind": kind, "sha256": file_sha256(p)}


def _write(out: str | Path, clusters: list[Cluster], report: DatasetReport, fractions: Sequence[float], seed: int,
           started: float) -> DatasetReport:
    splits, split_report = split_clusters(clusters, fractions, seed)
    report.split = split_report.to_dict()
    report.summary = split_summary(splits)
    with atomic_directory(out, MANIFEST) as tmp:
        for name in SPLITS:
            write_split(tmp / f"{name}.jsonl", splits[name])
        report.beir = write_beir(tmp / "beir", splits)
        for name in SPLITS:
            sha = file_sha256(tmp / f"{name}.jsonl")
            report.files[f"{name}.jsonl"] = {"sha256": sha, **{k: report.summary[name][k] for k in ("clusters", "questions")}}
        report.fingerprint = splits_fingerprint(report.files[f"{name}.jsonl"]["sha256"] for name in SPLITS)
        report.seconds = round(time.perf_counter() - started, 3)
        write_json(tmp / MANIFEST, report.manifest())
    log.info("wrote %s (%d/%d/%d clusters) in %.1fs", out, *(report.summary[s]["clusters"] for s in SPLITS), report.seconds)
    return report


def build_dataset(
    pairs_path: str | Path,
    out: str | Path,
    *,
    seed: int = 13,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    on_bad_line: OnBadLine = "error",
    key: KeyMode = "auto",
) -> DatasetReport:
    """Pair file -> clusters (transitive closure) -> 80/10/10 split -> dataset directory."""
    started = time.perf_counter()
    bad_lines = BadLines(on_bad_line, hint=SKIP_HINT)
    clusters, grouping = clusters_from_pairs(iter_pairs(pairs_path, bad_lines), key=key)
    report = DatasetReport(
        out=str(out), source=source_record(pairs_path, "pairs"),
        options={"seed": seed, "fractions": list(fractions), "on_bad_line": on_bad_line, "key": key},
        reading={"rows": grouping.pairs_read, "bad_lines": len(bad_lines.skipped), "skipped": bad_lines.to_list()},
        grouping=grouping.to_dict(), split={},
    )
    return _write(out, clusters, report, fractions, seed, started)


def build_dataset_from_qa_log(
    log_path: str | Path,
    out: str | Path,
    *,
    min_coherence: float = 0.1,
    seed: int = 13,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    on_bad_line: OnBadLine = "error",
    question_column: str | None = None,
    answer_column: str | None = None,
) -> DatasetReport:
    """QA log -> one cluster per answer -> coherence filter -> split -> dataset directory."""
    from hybrid_qpr.data.qalog import iter_qa_log

    started = time.perf_counter()
    bad_lines = BadLines(on_bad_line, hint=SKIP_HINT)
    records = iter_qa_log(log_path, question_column=question_column, answer_column=answer_column,
                          bad_lines=bad_lines)
    clusters, grouping = clusters_from_qa_log(records, min_coherence=min_coherence)
    report = DatasetReport(
        out=str(out), source=source_record(log_path, "qa-log"),
        options={"seed": seed, "fractions": list(fractions), "on_bad_line": on_bad_line,
                 "min_coherence": min_coherence, "question_column": question_column, "answer_column": answer_column},
        reading={"rows": grouping.records, "bad_lines": len(bad_lines.skipped), "skipped": bad_lines.to_list()},
        grouping=grouping.to_dict(), split={},
    )
    return _write(out, clusters, report, fractions, seed, started)


def dataset_stats(dataset_dir: str | Path) -> DatasetReport:
    """Read a dataset directory back: the manifest's counts, with the per-split summary
    recomputed from the split files (so edits after the build show up) and the split files
    whose sha256 no longer matches the manifest listed in ``modified``."""
    dataset_dir = Path(dataset_dir)
    path = dataset_dir / MANIFEST
    manifest = read_manifest(path, FORMAT, None, what="hybrid-qpr dataset manifest",
                             missing=f"{display_name(path)}: not found; is {dataset_dir} a directory written by "
                                     "'hybrid-qpr dataset build'?", fix="build the dataset again")
    fields = {k: manifest.get(k, {}) for k in ("source", "options", "reading", "grouping", "split", "beir", "files")}
    report = DatasetReport(out=str(dataset_dir), **fields, fingerprint=manifest.get("fingerprint", ""),
                           seconds=manifest.get("seconds", 0.0))
    report.summary = split_summary({s: load_split(dataset_dir, s) for s in SPLITS})
    for name, info in report.files.items():
        if isinstance(info, dict) and info.get("sha256") != file_sha256(dataset_dir / name):
            report.modified.append(name)
    if report.modified:
        log.warning("%s: %s changed since the build; the fingerprint %s no longer describes them",
                    dataset_dir, ", ".join(report.modified), report.fingerprint)
    return report
