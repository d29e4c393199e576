"""Train / validation / test split of clusters, and the split files of a dataset directory.

Clusters, not questions, are split: a paraphrase of a test question must never be seen
in training. Then val/test questions whose normalized text occurs in train (or earlier in
val/test) are removed: the same text under another id would sit in the corpus as an
unjudged "non-relevant" twin of the query, or leak the answer from training. Clusters left
with fewer than two questions cannot give a query with a relevant document and are dropped.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from hybrid_qpr.artifacts import iter_jsonl, write_jsonl
from hybrid_qpr.data.clusters import Cluster, Question, normalize_text
from hybrid_qpr.errors import ConfigError, InputError

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = get_args(Split)
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)

log = logging.getLogger(__name__)


@dataclass
class SplitReport:
    """Counts of one split run (written into the dataset manifest)."""

    seed: int
    fractions: tuple[float, float, float]
    clusters_assigned: dict[str, int] = field(default_factory=dict)
    removed_in_train: dict[str, int] = field(default_factory=dict)  # val/test questions whose text is in train
    removed_repeated: dict[str, int] = field(default_factory=dict)  # text already kept earlier in val/test
    clusters_too_small: dict[str, int] = field(default_factory=dict)  # < 2 questions left after removal
    clusters: dict[str, int] = field(default_factory=dict)
    questions: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def parse_fractions(text: str | Sequence[float]) -> tuple[float, float, float]:
    """``"0.8,0.1,0.1"`` (or a 3-sequence) -> checked (train, val, test) fractions summing to 1."""
    try:
        values = [float(x) for x in (text.split(",") if isinstance(text, str) else text)]
    except ValueError as exc:
        raise ConfigError(f"split={text!r}: expected three numbers like 0.8,0.1,0.1") from exc
    if len(values) != 3 or any(not math.isfinite(v) or v < 0 for v in values):
        raise ConfigError(f"split={text!r}: expected three non-negative numbers train,val,test like 0.8,0.1,0.1")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ConfigError(f"split={text!r}: the fractions sum to {sum(values):g}; they must sum to 1")
    if values[0] <= 0:
        raise ConfigError(f"split={text!r}: the train fraction must be > 0")
    return values[0], values[1], values[2]


def assign_indices(n: int, fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 13) -> dict[str, list[int]]:
    """Seeded assignment of ``n`` items (clusters, questions, articles) to train/val/test.

    The items are shuffled with ``random.Random(seed)``; val and test get ``round(n * fraction)``
    items each, train the rest. Each list is sorted, so items keep their input order."""
    fr = parse_fractions(fractions)
    n_val = round(n * fr[1])
    n_test = round(n * fr[2])
    if n_val + n_test > n:
        n_test = n - n_val
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return {"train": sorted(order[n_val + n_test:]), "val": sorted(order[:n_val]),
            "test": sorted(order[n_val:n_val + n_test])}


def split_clusters(
    clusters: Sequence[Cluster],
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    seed: int = 13,
) -> tuple[dict[str, list[Cluster]], SplitReport]:
    """Shuffle clusters with ``random.Random(seed)`` and cut them into train/val/test.

    Val and test get ``round(n * fraction)`` clusters each, train the rest, so the same
    input and seed always give the same split. Within a split, clusters keep their input
    order. Then overlap removal and the < 2 questions rule (module docstring) apply to
    val and test; train is left untouched.
    """
    fr = parse_fractions(fractions)
    n = len(clusters)
    assigned = assign_indices(n, fr, seed)
    report = SplitReport(seed=seed, fractions=fr)
    out: dict[str, list[Cluster]] = {"train": [clusters[i] for i in assigned["train"]]}
    report.clusters_assigned = {s: len(assigned[s]) for s in SPLITS}
    seen = {normalize_text(q.text) for c in out["train"] for q in c.questions}
    in_train = frozenset(seen)
    for split in ("val", "test"):
        kept_clusters: list[Cluster] = []
        removed_train = removed_repeated = too_small = 0
        for i in assigned[split]:
            kept: list[Question] = []
            for question in clusters[i].questions:
                key = normalize_text(question.text)
                if key in in_train:
                    removed_train += 1
                elif key in seen:
                    removed_repeated += 1
                else:
                    seen.add(key)
                    kept.append(question)
            if len(kept) < 2:
                too_small += 1
                continue
            kept_clusters.append(clusters[i] if len(kept) == len(clusters[i].questions) else Cluster(clusters[i].id, kept))
        out[split] = kept_clusters
        report.removed_in_train[split] = removed_train
        report.removed_repeated[split] = removed_repeated
        report.clusters_too_small[split] = too_small
    report.clusters = {s: len(out[s]) for s in SPLITS}
    for name, fraction in zip(SPLITS, fr):
        if fraction > 0 and not out[name]:
            log.warning("the %s split is empty (%d clusters in all, fraction %g); it cannot be used for "
                        "training or evaluation", name, n, fraction)
    report.questions = {s: sum(len(c.questions) for c in out[s]) for s in SPLITS}
    return {s: out[s] for s in SPLITS}, report


def write_split(path: str | Path, clusters: Iterable[Cluster]) -> int:
    """One cluster per line, ``{"id", "questions": [{"id", "text"}]}``, written atomically."""
    return write_jsonl(path, (c.to_dict() for c in clusters))


def read_clusters(path: str | Path) -> list[Cluster]:
    """Read a split file written by :func:`write_split`; malformed lines raise ``InputError``."""
    clusters: list[Cluster] = []
    for line, obj in iter_jsonl(path):
        cid = obj.get("id")
        questions = obj.get("questions")
        if not isinstance(cid, str) or not isinstance(questions, list):
            raise InputError(path, line, 'expected {"id": str, "questions": [{"id", "text"}, ...]}')
        members = []
        for q in questions:
            if not isinstance(q, dict) or not isinstance(q.get("id"), str) or not isinstance(q.get("text"), str):
                raise InputError(path, line, f"cluster {cid!r}: each question needs a string 'id' and 'text', found {q!r}")
            members.append(Question(q["id"], q["text"]))
        clusters.append(Cluster(cid, members))
    return clusters


def load_split(dataset_dir: str | Path, split: Split) -> list[Cluster]:
    """The clusters of one split of a dataset directory written by ``hybrid-qpr dataset build``."""
    if split not in SPLITS:
        raise ConfigError(f"split={split!r}: must be one of {', '.join(SPLITS)}")
    path = Path(dataset_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise InputError(path, None, "split file not found; is this a directory written by 'hybrid-qpr dataset build'?")
    return read_clusters(path)


def cluster_size_histogram(clusters: Iterable[Cluster]) -> dict[str, int]:
    """Counts of clusters by size bucket (2, 3, 4, 5-9, 10-19, 20-49, 50+)."""
    buckets = [(2, 2), (3, 3), (4, 4), (5, 9), (10, 19), (20, 49), (50, None)]
    hist = {(f"{lo}" if lo == hi else f"{lo}+" if hi is None else f"{lo}-{hi}"): 0 for lo, hi in buckets}
    for cluster in clusters:
        size = len(cluster.questions)
        for (lo, hi), label in zip(buckets, hist):
            if size >= lo and (hi is None or size <= hi):
                hist[label] += 1
                break
    return hist


def split_summary(splits: Mapping[str, Sequence[Cluster]]) -> dict[str, dict]:
    """Per split: clusters, questions, mean and max cluster size, size histogram."""
    out = {}
    for name, clusters in splits.items():
        sizes = [len(c.questions) for c in clusters]
        out[name] = {
            "clusters": len(sizes),
            "questions": sum(sizes),
            "mean_size": round(sum(sizes) / len(sizes), 3) if sizes else 0.0,
            "max_size": max(sizes, default=0),
            "sizes": cluster_size_histogram(clusters),
        }
    return out
