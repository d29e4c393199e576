"""The same answer-selection index on the embedded backend and on a cluster gives the same metrics;
a cluster index built with a model that carries tuned fusion takes it at ingest.

The data is made here: questions with candidate sentences (one or two correct), written in
the WikiQA layout and built by ``build_answer_selection``. The text has what tokenizers
disagree on (``?``, apostrophes, ``1,000``, ``3.5``, capitals, accents), so the test fails if
the cluster's BM25 does not see the embedded index's tokens or uses other k1/b.
"""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.answer_dataset import build_answer_selection
from hybrid_qpr.data.beir import load_beir, load_query_metadata
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.evaluation.evaluator import evaluate
from hybrid_qpr.evaluation.tasks import query_filters_from
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.testing.corpora import model_without_fusion_defaults, write_paraphrase_answers

pytestmark = pytest.mark.cluster

_PLACES = ["Paris", "Zürich", "São Paulo", "New York", "Kyoto", "Cairo", "Lima", "Oslo", "Perth", "Dakar"]
_THINGS = ["bridge", "museum", "stadium", "harbour", "cathedral", "library", "tower", "market", "park", "station"]
_FACTS = ["was built in 1,000 days", "is 3.5 km long", "opened in 1889", "holds 80,000 people",
          "isn't open on Sundays", "was the city's first", "costs $12 to enter", "is O'Brien's design"]


def _answers_tsv(seed: int = 7) -> str:
    rng = random.Random(seed)
    rows = ["qid\tquestion\tsentence\tlabel"]
    for i in range(40):
        place, thing = rng.choice(_PLACES), rng.choice(_THINGS)
        question = rng.choice([f"When was the {thing} in {place} built?", f"How long is {place}'s {thing}?",
                               f"What is special about the {thing} of {place}?", f"who designed the {thing} in {place}"])
        facts = rng.sample(_FACTS, 6)
        for k, fact in enumerate(facts):
            subject = f"The {thing} in {place}" if k < 2 else f"The {rng.choice(_THINGS)} in {rng.choice(_PLACES)}"
            label = 1 if k == 0 or (k == 1 and i % 3 == 0) else 0
            rows.append(f"q{i}\t{question}\t{subject} {fact}.\t{label}")
    return "\n".join(rows) + "\n"


def test_embedded_and_cluster_answer_selection_metrics_agree(tmp_path, cluster_backend, committed_encoder):
    src = tmp_path / "dev.tsv"
    src.write_text(_answers_tsv(), encoding="utf-8")
    build_answer_selection(src, tmp_path / "ds", split_name="val")
    beir = tmp_path / "ds" / "beir"
    _, queries, qrels = load_beir(beir, "val")
    filters = query_filters_from(load_query_metadata(beir, "group"), "group", list(queries))
    assert len(queries) == 40 and all(len(filters[q]) == 1 for q in queries)

    local = LocalIndex.create(tmp_path / "local", committed_encoder)
    local.ingest(iter_documents(beir / "corpus.jsonl"), committed_encoder, show_progress=False)
    cluster_backend.ingest(iter_documents(beir / "corpus.jsonl"), committed_encoder, show_progress=False)
    assert cluster_backend.count() == local.count() == 240

    results = {}
    for name, backend in (("embedded", local), ("cluster", cluster_backend)):
        results[name] = evaluate(HybridSearcher(backend, committed_encoder), queries, qrels, task="answer-selection",
                                 modes=("bm25", "knn", "hybrid"), query_filters=filters, fusion="l2", alpha=0.5)
    for mode in ("bm25", "knn", "hybrid"):
        embedded, cluster = results["embedded"][mode]["metrics"], results["cluster"][mode]["metrics"]
        assert set(embedded) == {"MAP", "MRR"} and 0.0 < embedded["MAP"] < 1.0, (mode, embedded)
        for metric, value in embedded.items():
            assert cluster[metric] == pytest.approx(value, abs=0.01), (mode, metric, embedded, cluster)

    # BM25 ranks each question's candidates the same way: the cluster sees the embedded tokens
    for qid, text in list(queries.items())[:10]:
        local_ids = [h.id for h in local.bm25(text, 10, filters[qid])]
        cluster_ids = [h.id for h in cluster_backend.bm25(text, 10, filters[qid])]
        assert set(local_ids) == set(cluster_ids) and local_ids[0] == cluster_ids[0], (qid, local_ids, cluster_ids)


def test_cluster_ingest_gives_the_index_its_model_tuned_fusion(tmp_path, cluster_engine, cluster_url, cluster_backend,
                                                                committed_encoder):
    """``tune --save-to-model`` on one cluster index, then ``ingest`` into a fresh one with that
    model: the fresh index's untuned hybrid is the tuned one, at least the better single mode,
    where RRF 0.5 is below kNN alone (``corpora.paraphrase_answers_tsv``)."""
    beir = write_paraphrase_answers(tmp_path / "answers")
    model = model_without_fusion_defaults(committed_encoder.model_dir, tmp_path / "model")
    engine = [f"--{cluster_engine}", cluster_url]
    tuned_index, fresh_index = f"{cluster_backend.index}-tuned", cluster_backend.index

    def run(*args):
        result = CliRunner().invoke(cli, [*args, *engine])
        assert result.exit_code == 0, result.output
        return result.output

    def maps(index, name, *more):
        run("evaluate", "--beir", str(beir), "--split", "val", "--index", index, "--task", "answer-selection",
            "--modes", "bm25,knn,hybrid", "--out", str(tmp_path / name), "--no-plot", *more)
        results = json.loads((tmp_path / name / "report.json").read_text())["results"]
        return {mode: row["metrics"]["MAP"] for mode, row in results.items()}

    try:
        assert "fusion defaults: none" in run("ingest", f"{beir}/corpus.jsonl", "--index", tuned_index, "--model", str(model))
        untuned = maps(tuned_index, "untuned")
        assert untuned["hybrid"] < untuned["knn"] - 0.1, untuned
        run("tune", "--beir", str(beir), "--split", "val", "--index", tuned_index, "--task", "answer-selection",
            "--save-to-model")
    finally:
        CliRunner().invoke(cli, ["index", "drop", tuned_index, "--yes", *engine])
    carried = json.loads((model / "config.json").read_text())["fusion_defaults"]
    out = run("ingest", f"{beir}/corpus.jsonl", "--index", fresh_index, "--model", str(model))
    assert f"fusion defaults: {carried['fusion']} alpha {carried['alpha']}, depth 100" in out and "from model" in out, out
    assert cluster_backend.fusion_defaults["fusion"] == carried["fusion"]
    adopted = maps(fresh_index, "adopted")
    assert adopted["hybrid"] >= max(adopted["bm25"], adopted["knn"]), adopted
