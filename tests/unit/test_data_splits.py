"""Splits (proportions, seed, overlap removal), split files and the BEIR layout."""

from __future__ import annotations

import pytest

from hybrid_qpr.data.beir import load_beir, load_qrels, write_beir
from hybrid_qpr.data.clusters import Cluster, Question, normalize_text
from hybrid_qpr.data.splits import load_split, parse_fractions, split_clusters, write_split
from hybrid_qpr.errors import ConfigError, InputError


def make_clusters(n: int, size: int = 2, extra: list[str] | None = None, prefix: str = "q") -> list[Cluster]:
    out = []
    for i in range(n):
        qs = [Question(f"{prefix}{i}_{j}", f"{prefix} question {i} variant {j}") for j in range(size)]
        qs += [Question(f"{prefix}{i}_x{k}", text) for k, text in enumerate(extra or [])]
        out.append(Cluster(f"{prefix}c{i}", qs))
    return out


def test_proportions_and_seed_determinism():
    clusters = make_clusters(100)
    splits, report = split_clusters(clusters, (0.8, 0.1, 0.1), seed=13)
    assert {s: len(v) for s, v in splits.items()} == {"train": 80, "val": 10, "test": 10}
    assert report.clusters == {"train": 80, "val": 10, "test": 10}
    ids = [c.id for s in splits.values() for c in s]
    assert sorted(ids) == sorted(c.id for c in clusters)  # a partition
    again, _ = split_clusters(clusters, (0.8, 0.1, 0.1), seed=13)
    other, _ = split_clusters(clusters, (0.8, 0.1, 0.1), seed=14)
    assert [c.id for c in again["test"]] == [c.id for c in splits["test"]]
    assert [c.id for c in other["test"]] != [c.id for c in splits["test"]]
    uneven, _ = split_clusters(make_clusters(7), (0.6, 0.2, 0.2), seed=0)
    assert [len(uneven[s]) for s in ("train", "val", "test")] == [5, 1, 1]  # val/test: round(7 * 0.2) = 1


def test_val_test_questions_seen_in_train_are_removed():
    # 20 clusters of 3 and 20 of 2, each also holding a variant of one shared question.
    clusters = (make_clusters(20, size=2, extra=["Shared question?"], prefix="a")
                + make_clusters(20, size=1, extra=["shared  QUESTION ?"], prefix="b"))
    splits, report = split_clusters(clusters, seed=5)
    shared = normalize_text("shared question?")
    assert any(normalize_text(q.text) == shared for c in splits["train"] for q in c.questions)
    for name in ("val", "test"):
        assert report.clusters_assigned[name] == 4
        assert report.removed_in_train[name] == 4  # one shared question per assigned cluster
        assert all(normalize_text(q.text) != shared for c in splits[name] for q in c.questions)
        assert all(len(c.questions) >= 2 for c in splits[name])
        assert report.clusters[name] + report.clusters_too_small[name] == 4
    assert sum(report.clusters_too_small.values()) > 0  # a size-2 cluster lost its shared question


def test_repeated_text_within_val_and_test_is_removed():
    clusters = make_clusters(4, size=2, extra=["same text"])
    splits, report = split_clusters(clusters, (0.001, 0.5, 0.499), seed=1)
    assert splits["train"] == []
    assert report.removed_repeated["val"] + report.removed_repeated["test"] == 3  # the first copy is kept
    kept = [q.text for s in ("val", "test") for c in splits[s] for q in c.questions]
    assert kept.count("same text") == 1


def test_parse_fractions():
    assert parse_fractions("0.7,0.15,0.15") == (0.7, 0.15, 0.15)
    for bad in ("0.8,0.1", "0.5,0.1,0.1", "a,b,c", "0,0.5,0.5", "1.2,-0.1,-0.1"):
        with pytest.raises(ConfigError, match="split="):
            parse_fractions(bad)


def test_split_file_round_trip_and_errors(tmp_path):
    clusters = make_clusters(3)
    write_split(tmp_path / "val.jsonl", clusters)
    assert load_split(tmp_path, "val") == clusters
    with pytest.raises(InputError, match="split file not found"):
        load_split(tmp_path, "test")
    with pytest.raises(ConfigError):
        load_split(tmp_path, "dev")  # type: ignore[arg-type]
    (tmp_path / "train.jsonl").write_text('{"id": "c0", "questions": [{"id": "a", "text": "x"}]}\n{"id": "c1"}\n')
    with pytest.raises(InputError, match=r"train.jsonl:2"):
        load_split(tmp_path, "train")


def test_beir_round_trip(tmp_path):
    train = [Cluster("t", [Question("1", "train a"), Question("2", "train b")])]
    val = [Cluster("v", [Question("3", "val a"), Question("4", "val b"), Question("5", "val c")])]
    test = [Cluster("s", [Question("6", "test a"), Question("7", "test b")])]
    counts = write_beir(tmp_path, {"train": train, "val": val, "test": test})
    assert counts == {"corpus": 7, "queries": 5, "qrels_val": 6, "qrels_test": 2}
    corpus, queries, qrels = load_beir(tmp_path, "val")
    assert corpus == {"1": "train a", "2": "train b", "3": "val a", "4": "val b", "5": "val c", "6": "test a", "7": "test b"}
    assert queries == {"3": "val a", "4": "val b", "5": "val c"}
    assert qrels == {"3": {"4": 1, "5": 1}, "4": {"3": 1, "5": 1}, "5": {"3": 1, "4": 1}}
    _, queries, qrels = load_beir(tmp_path, "test")
    assert queries == {"6": "test a", "7": "test b"} and qrels == {"6": {"7": 1}, "7": {"6": 1}}
    assert (tmp_path / "qrels" / "test.tsv").read_text().splitlines()[0] == "query-id\tcorpus-id\tscore"


def test_beir_errors(tmp_path):
    with pytest.raises(ConfigError, match="occurs twice"):
        write_beir(tmp_path / "dup", {"train": [Cluster("a", [Question("1", "x"), Question("1", "y")])]})
    with pytest.raises(InputError, match="missing"):
        load_beir(tmp_path, "test")
    bad = tmp_path / "bad.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(InputError, match=r"bad.tsv:2: score must be an integer"):
        load_qrels(bad)
