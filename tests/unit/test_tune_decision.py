"""Tuning keeps the untuned prior unless the winner's gain is clearly real: the lower bound of
the bootstrap interval of its per-query gain above 0 (one rule for ``tune`` and the workbench)."""

from __future__ import annotations

import json

from hybrid_qpr.evaluation.evaluator import (TuneResult, decision_sentence, settle_against_prior, tune_candidates,
                                             untuned_prior)
from hybrid_qpr.evaluation.significance import clearly_better
from hybrid_qpr.testing.cli import run
from hybrid_qpr.types import Candidates, Hit

PRIOR = {"fusion": "rrf", "alpha": 0.5}


def _result(tuned: dict[str, float]) -> TuneResult:
    mean = sum(tuned.values()) / len(tuned)
    return TuneResult("minmax", 0.8, mean, 0.4, 0.5, 100, len(tuned), per_query={"tuned": dict(tuned), "bm25": {},
                                                                               "knn": {}})


def test_a_clear_gain_replaces_the_prior():
    prior = {f"q{i}": 0.5 for i in range(200)}
    tuned = {f"q{i}": 1.0 if i % 4 else 0.5 for i in range(200)}  # better on 150, never worse
    clear, found = clearly_better(prior, tuned)
    assert clear and found["low"] > 0
    result = settle_against_prior(_result(tuned), prior, PRIOR)
    assert (result.fusion, result.alpha) == ("minmax", 0.8) and result.decision["kept"] == "tuned"
    assert result.defaults["tuned"]["kept"] == "tuned"
    assert "lower bound is above 0, so the tuned minmax alpha 0.8 is kept" in decision_sentence(result)


def test_a_gain_within_noise_keeps_the_prior():
    # ahead on 3 of 12 queries, behind on 2: a grid's lucky winner, not a real gain
    prior = {f"q{i}": 0.5 for i in range(12)}
    tuned = {**prior, "q0": 1.0, "q1": 1.0, "q2": 1.0, "q3": 0.25, "q4": 0.25}
    clear, found = clearly_better(prior, tuned)
    assert not clear and found["delta"] > 0 and found["low"] <= 0
    result = settle_against_prior(_result(tuned), prior, PRIOR)
    assert (result.fusion, result.alpha, result.bounds) == ("rrf", 0.5, {})
    assert result.mrr == 0.5 and result.per_query["tuned"] == prior
    assert result.decision["best"]["fusion"] == "minmax" and result.defaults["fusion"] == "rrf"
    assert result.defaults["tuned"]["kept"] == "prior" and result.defaults["tuned"]["gain_over_prior"]["low"] <= 0
    sentence = decision_sentence(result)
    assert "is not above 0, so the prior rrf alpha 0.5 is kept" in sentence and "untuned prior (rrf alpha 0.5)" in sentence


def test_the_grid_settles_against_the_prior_on_fused_lists():
    def lists(relevant_in_knn: bool):
        cands, qrels = {}, {}
        for i in range(60):
            rel = f"d{i}"
            bm25 = [Hit(f"x{i}", 9.0), Hit(rel, 8.0)] + [Hit(f"x{i}-{k}", 7.0 - k) for k in range(4)]
            knn = [Hit(f"y{i}-{k}", 0.9 - k / 10) for k in range(5)] + ([Hit(rel, 0.1)] if relevant_in_knn else [])
            cands[f"q{i}"] = Candidates.of_hits(bm25, knn)
            qrels[f"q{i}"] = {rel: 1}
        return cands, qrels

    # the relevant document second in BM25, absent from kNN: RRF 0.5 puts it third (MRR 1/3),
    # BM25 alone second (1/2) on every query, a gain no resample doubts
    clear = tune_candidates(*lists(False), prior=PRIOR)
    assert clear.decision["kept"] == "tuned" and clear.alpha == 0.0 and abs(clear.mrr - 0.5) < 1e-9
    # in kNN too (sixth), RRF 0.5 ranks it first as well: no gain over the prior, which stays
    tied = tune_candidates(*lists(True), prior=PRIOR)
    assert tied.decision["kept"] == "prior" and (tied.fusion, tied.alpha) == ("rrf", 0.5)
    assert untuned_prior(object()) == PRIOR  # a model without fusion defaults: RRF 0.5


def test_tune_says_which_it_kept(tmp_path):
    from pathlib import Path

    beir = Path(__file__).resolve().parents[2] / "examples" / "beir"
    corpus = beir / "corpus.jsonl"
    assert run("ingest", str(corpus), "--index", str(tmp_path / "idx")).exit_code == 0
    out = run("tune", "--beir", str(beir), "--index", str(tmp_path / "idx"), "--max-queries", "10")
    assert out.exit_code == 0, out.output
    from hybrid_qpr.encoders import Encoder

    prior = untuned_prior(Encoder.load(None))  # the default model's fusion defaults
    said = f"{prior['fusion']} alpha {prior['alpha']:.1f}"
    assert "best grid point (" in out.output and f"untuned prior ({said})" in out.output
    assert (f"so the prior {said} is kept" in out.output) or ("is above 0, so the tuned" in out.output)
    stored = json.loads((tmp_path / "idx" / "manifest.json").read_text())["fusion"]
    assert stored["tuned"]["kept"] in ("prior", "tuned") and "gain_over_prior" in stored["tuned"]


def test_tune_chooses_among_the_bundled_rerankers_and_query_takes_the_tuned_one(tmp_path):
    """``tune --reranker`` without a directory tunes each bundled cross-encoder and stores the best;
    ``query --reranker`` without one takes it (before any tune: one line saying there is none)."""
    from pathlib import Path

    from hybrid_qpr.encoders.base import fingerprint
    from hybrid_qpr.rerankers.cross_encoder import bundled_rerankers
    from hybrid_qpr.testing.cli import one_error_line

    beir = Path(__file__).resolve().parents[2] / "examples" / "beir"
    index = str(tmp_path / "idx")
    assert run("ingest", str(beir / "corpus.jsonl"), "--index", index).exit_code == 0
    query = ("query", "how do i reset my netflix password?", "--index", index, "--json", "-k", "3")
    assert "this index has none" in one_error_line(run(*query, "--reranker"))
    bundled = bundled_rerankers()
    assert bundled and all(json.loads((d / "config.json").read_text())["kind"] == "cross-encoder" for d in bundled)
    out = run("tune", "--beir", str(beir), "--index", index, "--max-queries", "10", "--fusions", "rrf",
              "--reranker", "--reranker-depths", "5")
    assert out.exit_code == 0, out.output
    chosen = json.loads((tmp_path / "idx" / "manifest.json").read_text())["fusion"]["reranker"]
    assert chosen["model"] in {fingerprint(d) for d in bundled} and f"chosen among the bundled cross-encoders ({', '.join(d.name for d in bundled)})" in out.output
    hits = json.loads(run(*query, "--reranker", "--reranker-depth", "2").output)["hits"]
    assert [h["cross_encoder"]["rank"] for h in hits[:2]] == [1, 2] and hits[2]["cross_encoder"] is None
