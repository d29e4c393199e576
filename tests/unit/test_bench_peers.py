"""benchmarks/bench_peers.py's own logic, run as a user runs it, on hybrid-qpr alone (the peers'
packages are not needed): the BEIR subset (a test split's documents never enter the corpus),
the query's own id dropped only where it is the same text in the corpus, the metrics of each
mode, and the tuned mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_qpr.data.beir import load_beir, write_beir, write_beir_files
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import exact_run, score_run
from hybrid_qpr.resources import model_dir
from hybrid_qpr.testing.corpora import topic_clusters

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_peers.py"
pytestmark = pytest.mark.slow  # each case loads the model and builds an index in a new process


def _bench(beir: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(beir), "--engines", "hybrid-qpr", "--warmup", "2",
                           "--out", str(out), *args], capture_output=True, text=True, cwd=out.parent, timeout=300)


def test_paraphrase_set_scores_every_mode_with_own_ids_dropped_and_no_test_document(tmp_path):
    clusters = topic_clusters(60, seed=5, varied_sizes=True)
    beir = tmp_path / "beir"
    write_beir(beir, {"train": clusters[:30], "val": clusters[30:45], "test": clusters[45:]})
    corpus, queries, qrels = load_beir(beir, "val")
    test_ids = {q.id for c in clusters[45:] for q in c.questions}
    out = tmp_path / "peers.json"

    done = _bench(beir, out, "--queries", "1000", "--tune-queries", "0", "--docs", "100000")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["corpus"] == len(corpus) - len(test_ids)  # every document but the test split's
    assert result["queries"] == len(queries) == result["own_ids_dropped"]
    modes = result["engines"]["hybrid-qpr"]["modes"]
    assert set(modes) == {"bm25", "knn", "hybrid"}

    # kNN over this small index is exact: its scores are those of an exact search of the same
    # vectors with the own id dropped (a kept own id would give every query H@1 = 1)
    encoder = Encoder.load(model_dir())
    kept = [d for d in corpus if d not in test_ids]
    run = exact_run(list(queries), encoder.encode([queries[q] for q in queries]), kept,
                    encoder.encode([corpus[d] for d in kept], side="document"), encoder.distance)
    expected = score_run(run, qrels)
    assert expected["H@1"] < 1
    for metric, value in modes["knn"]["metrics"].items():
        assert value == pytest.approx(expected[metric], abs=1e-4), metric
    for row in modes.values():
        assert row["latency"]["p50_ms"] > 0 and row["latency"]["p95_ms"] >= row["latency"]["p50_ms"]
    assert result["engines"]["hybrid-qpr"]["disk_bytes"] > 0
    assert "| hybrid-qpr" in done.stdout


def test_a_query_id_shared_by_another_text_is_not_dropped_and_tuning_adds_its_mode(tmp_path):
    # ids as in many BEIR sets: numbers for queries and documents alike, so query "3" and
    # document "3" are different texts, and here the document is the query's answer
    topics = ["password reset", "credit card", "delivery date", "home address", "bank account", "phone number"]
    corpus = [{"_id": str(i), "title": "", "text": f"how do i change my {t} online"} for i, t in enumerate(topics)]
    corpus += [{"_id": f"x{i}", "title": "", "text": f"where is the nearest {t} office"} for i, t in enumerate(topics)]
    queries = [{"_id": str(i), "text": f"{t} change"} for i, t in enumerate(topics)]
    beir = tmp_path / "beir"
    write_beir_files(beir, corpus, queries, {"val": [(str(i), str(i), 1) for i in range(len(topics))]})
    out = tmp_path / "peers.json"

    done = _bench(beir, out, "--queries", "3", "--tune-queries", "3", "--docs", "100")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["own_ids_dropped"] == 0
    engine = result["engines"]["hybrid-qpr"]
    # each answer holds every query term, so BM25 finds it; dropped as an own id, it would be 0
    assert engine["modes"]["bm25"]["metrics"]["Recall@20"] == 1.0
    assert set(engine["modes"]) == {"bm25", "knn", "hybrid", "hybrid-tuned"}
    assert engine["tuned"]["queries"] == 3


def test_an_unknown_engine_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--engines", "hybrid-qpr,elastic"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert "--engines hybrid-qpr,elastic: known engines are hybrid-qpr, lancedb, milvus-lite, qdrant" in done.stderr
