"""Synthetic paraphrase clusters the training tests write themselves: each cluster draws its
questions from four topic words plus one random word, so a model can learn them in seconds."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hybrid_qpr.data.clusters import Cluster, Question
from hybrid_qpr.data.splits import write_split


def topic_clusters(n: int, seed: int, varied_sizes: bool = False) -> list[Cluster]:
    """n clusters of 3 questions (3 to 5 with ``varied_sizes``), reproducible from ``seed``."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(400)]
    clusters = []
    for c in range(n):
        topic = rng.sample(words, 4)
        size = 3 + c % 3 if varied_sizes else 3
        questions = [Question(f"{c}-{k}", " ".join(rng.sample(topic, 3) + rng.sample(words, 1))) for k in range(size)]
        clusters.append(Cluster(f"c{c}", questions))
    return clusters


def write_dataset_dir(path: Path, splits: dict[str, list[Cluster]], fingerprint: str | None = None) -> Path:
    """``<split>.jsonl`` files by the project's own ``write_split`` (and a manifest when a
    fingerprint is given), as `dataset build` leaves them."""
    for split, clusters in splits.items():
        write_split(path / f"{split}.jsonl", clusters)
    if fingerprint is not None:
        (path / "manifest.json").write_text(json.dumps({"format": "hybrid-qpr-dataset", "fingerprint": fingerprint}))
    return path
