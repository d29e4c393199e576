"""DBSF, min-max bounds, autocut and the business-signal formula against hand-computed values,
on the embedded index's searcher, in tune's grid and on the command line."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from hybrid_qpr import fusion
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.fusion import Bound, Bounds, autocut, check_bounds, fuse, normalize
from hybrid_qpr.signals import Decay, Signals, parse_boost, parse_decay
from hybrid_qpr.types import Hit

BM25 = [Hit("a", 10.0), Hit("b", 6.0), Hit("c", 2.0)]
KNN = [Hit("c", 0.9), Hit("d", 0.6), Hit("a", 0.3)]
DAY = 86400.0


# ---------------------------------------------------------------------- DBSF
def test_dbsf_is_mean_plus_minus_three_sigma_clipped_and_in_the_grid():
    # [10, 6, 2]: mean 6, population std sqrt(32/3); norm = 0.5 + (s - 6) / (6 std)
    std = math.sqrt(32 / 3)
    assert normalize([10.0, 6.0, 2.0], "dbsf") == pytest.approx([0.5 + 4 / (6 * std), 0.5, 0.5 - 4 / (6 * std)])
    assert normalize([4.0, 4.0], "dbsf") == [0.5, 0.5]
    # an outlier beyond mean + 3 sigma is clipped to 1, the rest stay in [0, 1]
    outlier = normalize([1000.0] + [1.0] * 20 + [0.0] * 20, "dbsf")
    assert outlier[0] == 1.0 and all(0.0 <= v <= 1.0 for v in outlier)
    fused = {f.id: f.score for f in fuse(BM25, KNN, fusion="dbsf", alpha=0.5)}
    knn_std = math.sqrt(0.06)  # [0.9, 0.6, 0.3]: mean 0.6
    bm = {"a": 0.5 + 4 / (6 * std), "b": 0.5, "c": 0.5 - 4 / (6 * std)}
    kn = {"c": 0.5 + 0.3 / (6 * knn_std), "d": 0.5, "a": 0.5 - 0.3 / (6 * knn_std)}
    expected = {d: 0.5 * bm.get(d, 0.0) + 0.5 * kn.get(d, 0.0) for d in "abcd"}  # missing: 0
    assert fused == pytest.approx(expected)
    assert "dbsf" in fusion.FUSION_METHODS


# ---------------------------------------------------------------------- min-max bounds
def test_minmax_bounds_apply_clip_and_ignore_hand_computed():
    scores = [10.0, 6.0, 2.0]
    assert normalize(scores, "minmax", Bounds(Bound("ignore", 5.0))) == normalize(scores, "minmax")
    # apply: a lower bound below the list's minimum replaces it; above it, it does not
    assert normalize(scores, "minmax", Bounds(Bound("apply", 0.0))) == pytest.approx([1.0, 0.6, 0.2])
    assert normalize(scores, "minmax", Bounds(Bound("apply", 5.0))) == pytest.approx([1.0, 0.5, 0.0])
    # clip: the bound always replaces it; scores below it count as 0
    assert normalize(scores, "minmax", Bounds(Bound("clip", 4.0))) == pytest.approx([1.0, 1 / 3, 0.0])
    assert normalize(scores, "minmax", Bounds(upper=Bound("clip", 8.0))) == pytest.approx([1.0, 2 / 3, 0.0])
    assert normalize(scores, "minmax", Bounds(upper=Bound("apply", 20.0))) == pytest.approx([8 / 18, 4 / 18, 0.0])
    # a single strong hit is no longer stretched alone: lower bound 0 keeps its real size
    assert normalize([0.8], "minmax", Bounds(Bound("apply", 0.0), Bound("apply", 1.0))) == pytest.approx([0.8])
    bounds = check_bounds({"bm25": {"lower": "clip:4"}})
    fused = {f.id: f.score for f in fuse(BM25, KNN, fusion="minmax", alpha=0.5, bounds=bounds)}
    assert fused == pytest.approx({"a": 0.5, "b": 0.5 / 3, "c": 0.5, "d": 0.25})


def test_bounds_are_checked_with_one_line():
    with pytest.raises(ConfigError, match="mode must be one of apply, clip, ignore"):
        Bound.parse("cut:0.3")
    with pytest.raises(ConfigError, match="'x' is not a number"):
        Bound.parse("clip:x")
    with pytest.raises(ConfigError, match="expected one of bm25, knn"):
        check_bounds({"title": {"lower": "clip:1"}})
    with pytest.raises(ConfigError, match="bounds apply to minmax fusion only, not rrf"):
        fuse(BM25, KNN, fusion="rrf", bounds=check_bounds({"knn": {"lower": "clip:0.5"}}))
    with pytest.raises(ConfigError, match="fusion_defaults: bounds.knn.lower"):
        fusion.check_fusion_defaults({"fusion": "minmax", "alpha": 0.5, "bounds": {"knn": {"lower": "nope"}}}, "x.json")


# ---------------------------------------------------------------------- autocut
def test_autocut_cuts_after_the_largest_gaps():
    assert autocut([1.0, 0.95, 0.9, 0.3, 0.25], 1) == 3
    assert autocut([1.0, 0.5, 0.45, 0.44, 0.1], 2) == 4  # gaps 0.5 (after 1) and 0.34 (after 4)
    assert autocut([1.0, 0.5, 0.45, 0.44, 0.1], 0) == 5
    assert autocut([0.7, 0.7, 0.7], 1) == 3 and autocut([0.7, 0.1], 1) == 2 and autocut([], 1) == 0
    with pytest.raises(ConfigError, match="autocut=-1"):
        autocut([1.0], -1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40), st.integers(0, 10))
def test_autocut_never_drops_the_top_hit_and_keeps_a_prefix(values, jumps):
    scores = sorted(values, reverse=True)
    kept = autocut(scores, jumps)
    assert 1 <= kept <= len(scores)
    if jumps:  # 0 is off; from 1 on, more jumps allowed never keep fewer
        assert autocut(scores, jumps + 1) >= kept


# ---------------------------------------------------------------------- decay and the formula
def test_decay_functions_match_elasticsearchs_definitions():
    for function, at_two_scales in (("exp", 0.25), ("gauss", 0.5 ** 4), ("linear", 0.0)):
        d = Decay("views", function, origin=100.0, scale=10.0, offset=5.0, decay=0.5)
        assert d.value(100.0, 100.0) == 1.0 and d.value(104.0, 100.0) == 1.0  # within the offset
        assert d.value(115.0, 100.0) == pytest.approx(0.5) and d.value(85.0, 100.0) == pytest.approx(0.5)
        assert d.value(125.0, 100.0) == pytest.approx(at_two_scales), function
        assert d.value(None, 100.0) == 0.0 and d.value("n/a", 100.0) == 0.0
    # gauss: exp(-d^2 / (2 sigma^2)) with sigma^2 = -scale^2 / (2 ln decay)
    sigma2 = -(10.0 ** 2) / (2 * math.log(0.3))
    g = Decay("views", "gauss", origin=0.0, scale=10.0, decay=0.3)
    assert g.value(7.0, 0.0) == pytest.approx(math.exp(-49.0 / (2 * sigma2)))


def test_dates_decay_by_durations_from_a_date_or_now():
    d = parse_decay("created:exp:30d:2024-03-31")
    assert (d.field, d.function, d.decay) == ("created", "exp", 0.5)
    origin = d.origin_value()
    assert d.value("2024-03-01", origin) == pytest.approx(0.5)
    assert d.value("2024-03-01T00:00:00Z", origin) == pytest.approx(0.5)
    assert parse_decay("created:gauss:12h:2024-03-31T12:00:00Z:1h:0.3").offset == "1h"
    assert parse_decay("created:linear:7d").origin == "now"
    with pytest.raises(ConfigError, match="expected FIELD:FUNCTION:SCALE"):
        parse_decay("created:exp")
    with pytest.raises(ConfigError, match="function='cubic'"):
        parse_decay("created:cubic:1d")
    with pytest.raises(ConfigError, match="decay=1.5"):
        parse_decay("n:exp:1:0:0:1.5")
    with pytest.raises(ConfigError, match="expected FIELD=WEIGHT"):
        parse_boost("votes")


def test_the_formula_adds_boosts_and_the_weighted_decay():
    formula = Signals({"votes": 0.01}, Decay("created", "exp", "2024-03-31", "30d"), weight=0.2)
    terms = formula.contributions({"votes": 50, "created": "2024-03-01"}, formula.origin())
    assert terms.boosts == {"votes": 0.5} and terms.decay == pytest.approx(0.1) and terms.total == pytest.approx(0.6)
    assert formula.contributions({}, formula.origin()).total == 0.0
    assert Signals.from_dict(formula.as_dict()) == formula
    assert not Signals() and not Signals(decay=Decay("created"), weight=0.0)


# ---------------------------------------------------------------------- on the searcher
@pytest.fixture(scope="module")
def dated(tmp_path_factory, committed_encoder, question_bank):
    """The question bank with a date (``created``, one day apart by position) and ``votes``."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.search import HybridSearcher

    docs = [d._replace(metadata={**d.metadata, "created": f"2024-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}",
                                 "votes": (i * 37) % 101}) for i, d in enumerate(question_bank)]
    idx = LocalIndex.create(tmp_path_factory.mktemp("signals") / "idx", committed_encoder)
    idx.ingest(docs, committed_encoder, show_progress=False)
    return HybridSearcher(idx, committed_encoder)


QUERY = "how do i change my email address?"


def test_signals_rescore_the_fused_list_and_explain_each_hit(dated):
    formula = Signals({"votes": 0.001}, Decay("created", "gauss", "2024-08-01", "10d"), weight=0.05)
    from hybrid_qpr.types import QueryVector

    shown = dated.search(QUERY, fusion="dbsf", top_k=10, depth=30, signals=formula)
    # the reference: every document of the two depth-30 lists, fused, plus the formula by hand
    bm25, knn = dated.candidates(QUERY, QueryVector.encoding(dated.encoder, QUERY), 30)
    every = fusion.fuse_ranked((bm25.ids, bm25.scores), (knn.ids, knn.scores), fusion="dbsf", alpha=0.5)
    meta = {i: d.metadata for i, d in dated.backend.documents([f.id for f in every]).items()}
    origin = formula.origin()
    fused = {f.id: f.score for f in every}
    expected = sorted(((fused[i] + formula.contributions(meta[i], origin).total, i) for i in fused),
                      key=lambda pair: (-pair[0], pair[1]))[:10]
    assert [r.id for r in shown] == [i for _, i in expected]
    assert [r.score for r in shown] == pytest.approx([score for score, _ in expected])
    plain = dated.search(QUERY, fusion="dbsf", top_k=10, depth=30)
    for r in shown:
        assert r.fused_score == pytest.approx(fused[r.id])
        assert set(r.signals) == {"boost:votes", "decay:created"}
        assert r.score == pytest.approx(r.fused_score + sum(r.signals.values()))
        assert r.to_dict()["signals"] == r.signals
    assert plain[0].signals is None and "signals" not in plain[0].to_dict()


def test_autocut_and_bounds_on_the_searcher_and_server_side_refusals(dated):
    whole = dated.search(QUERY, top_k=20)
    cut = dated.search(QUERY, top_k=20, autocut=1)
    assert 1 <= len(cut) <= 20 and cut[0].id == whole[0].id
    assert len(cut) == autocut([r.score for r in whole], 1)
    bounded = dated.search(QUERY, fusion="minmax", bounds={"knn": {"lower": "clip:0.5"}}, top_k=5)
    assert bounded[0].id == "q010"
    with pytest.raises(ConfigError, match="bounds apply to minmax fusion only, not dbsf"):
        dated.search(QUERY, fusion="dbsf", bounds={"knn": {"lower": "clip:0.5"}})
    with pytest.raises(ConfigError, match="needs a backend that runs it in the engine"):
        dated.search(QUERY, fusion="dbsf", server_side=True)


def test_tuned_bounds_and_signals_are_stored_and_used(dated):
    from hybrid_qpr.evaluation.evaluator import tune_candidates, tune_signals
    from hybrid_qpr.types import Candidates, QueryVector

    queries = {"q010": QUERY, "q031": "how can i update my phone number?"}
    qrels = {"q010": {f"q{i:03d}": 1 for i in range(10, 20) if i != 10},
             "q031": {f"q{i:03d}": 1 for i in range(30, 40) if i != 31}}
    cands = {q: dated.candidates(t, QueryVector.encoding(dated.encoder, t), 30) for q, t in queries.items()}
    assert all(isinstance(c, Candidates) for c in cands.values())
    result = tune_candidates(cands, qrels, alphas=(0.0, 0.5, 1.0), bound_grid=[{"knn": {"lower": "clip:0.4"}}])
    points = {(g["fusion"], g["alpha"], json.dumps(g.get("bounds"))) for g in result.grid}
    assert ("dbsf", 0.5, "null") in points and ("minmax", 0.5, '{"knn": {"lower": "clip:0.4"}}') in points
    formula = Signals(decay=Decay("votes", "linear", 100.0, 50.0))
    found = tune_signals(dated, queries, qrels, result, formula, weights=(0.0, 0.1, 1.0))
    assert set(found.by_weight) == {0.0, 0.1, 1.0} and found.weight in found.by_weight
    result.signals = formula.with_weight(0.1)
    result.bounds = check_bounds({"knn": {"lower": "clip:0.4"}})
    stored = fusion.check_fusion_defaults({**result.defaults, "fusion": "minmax"}, "test")
    assert stored["signals"]["weight"] == 0.1 and stored["bounds"] == {"knn": {"lower": "clip:0.4"}}
    bounds, signals = dated.fusion_extras("minmax", stored["bounds"], stored["signals"])
    assert bounds == result.bounds and signals == formula.with_weight(0.1)


# ---------------------------------------------------------------------- command line
def test_query_explain_and_one_line_errors(dated, tmp_path):
    from hybrid_qpr.cli.main import cli as main

    index = str(dated.backend.path)
    runner = CliRunner()
    out = runner.invoke(main, ["query", QUERY, "--index", index, "--fusion", "dbsf", "--decay", "created:exp:30d:2024-08-01",
                               "--signal-weight", "0.1", "--boost", "votes=0.001", "--explain", "-k", "3"],
                        terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "fused " in out.output and "decay:created" in out.output and "boost:votes" in out.output
    assert "(rank " in out.output
    as_json = runner.invoke(main, ["query", QUERY, "--index", index, "--decay", "created:exp:30d", "--json", "-k", "2"])
    hit = json.loads(as_json.output)["hits"][0]
    assert set(hit["signals"]) == {"decay:created"} and hit["fused_score"] is not None
    for args, message in ((["--lower-bound", "knn"], "expected LIST=MODE:VALUE"),
                          (["--lower-bound", "knn=cut:1"], "mode must be one of apply, clip, ignore"),
                          (["--decay", "created:exp"], "expected FIELD:FUNCTION:SCALE"),
                          (["--signal-weight", "0.2"], "give --decay too"),
                          (["--fusion", "rrf", "--upper-bound", "bm25=clip:3"], "minmax fusion only")):
        bad = runner.invoke(main, ["query", QUERY, "--index", index, *args])
        assert bad.exit_code != 0 and message in bad.output, (args, bad.output)
        assert "Traceback" not in bad.output


def test_tuned_signals_reach_every_search_and_the_workbenchs_hit_details(tmp_path, committed_encoder, question_bank):
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.search import HybridSearcher
    from hybrid_qpr.workbench.judgments import JudgmentStore
    from hybrid_qpr.workbench.service import Workbench

    docs = [d._replace(metadata={**d.metadata, "votes": i}) for i, d in enumerate(question_bank[:40])]
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(docs, committed_encoder, show_progress=False)
    formula = Signals(decay=Decay("votes", "exp", 40.0, 10.0), weight=0.1)
    idx.set_fusion_defaults({"fusion": "dbsf", "alpha": 0.5, "signals": formula.as_dict()})
    searcher = HybridSearcher(idx, committed_encoder)
    assert all(r.signals is not None for r in searcher.search(QUERY, top_k=5))
    assert searcher.search(QUERY, top_k=5, signals=Signals())[0].signals is None  # an empty formula turns them off
    assert searcher.search(QUERY, top_k=5, fusion="rrf")[0].signals is None  # tuned on dbsf's scale: not for rrf
    for mode in ("bm25", "knn"):  # nothing is fused there: the tuned formula stays with hybrid
        assert searcher.request(QUERY, mode=mode, fusion="dbsf").signals is None
    workbench = Workbench(searcher, JudgmentStore(tmp_path / "judgments"), index="idx", backend="local")
    hit = workbench.search(QUERY, k=3)["hits"][0]
    assert set(hit["signals"]) == {"decay:votes"}
    assert hit["score"] == pytest.approx(hit["fused_score"] + hit["signals"]["decay:votes"])
    idx.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40))
def test_dbsf_stays_in_the_unit_interval_and_keeps_the_order(values):
    normed = normalize(values, "dbsf")
    assert all(0.0 <= v <= 1.0 for v in normed)
    for (a, na), (b, nb) in zip(zip(values, normed), list(zip(values, normed))[1:]):
        assert (a - b) * (na - nb) >= 0  # a higher score never normalises lower


def test_tune_command_tries_bounds_and_a_signal_weight_and_stores_them(tmp_path, dated):
    from hybrid_qpr.cli.main import cli

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    ids = [f"q{i:03d}" for i in range(0, 200, 7)]
    texts = {d.id: d.text for d in dated.backend.documents(ids).values()}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in texts.items()))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in texts.items()))
    rows = [f"{q}\tq{(int(q[1:]) // 10) * 10 + j:03d}\t1" for q in ids for j in range(10) if (int(q[1:]) // 10) * 10 + j != int(q[1:])]
    (beir / "qrels" / "val.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    out = CliRunner().invoke(cli, ["tune", "--beir", str(beir), "--index", str(dated.backend.path), "--dry-run",
                                   "--fusions", "rrf,dbsf,minmax", "--lower-bound-grid", "knn=clip:0.2,0.5",
                                   "--decay", "votes:linear:50:100", "--signal-weights", "0,0.01,0.5"])
    assert out.exit_code == 0, out.output
    assert "signal weight 0.01" in out.output and "signal weight 0.5" in out.output
    assert "best: fusion=" in out.output and ("signals: weight" in out.output or "signals: do not help" in out.output)
    bad = CliRunner().invoke(cli, ["tune", "--beir", str(beir), "--index", str(dated.backend.path), "--dry-run",
                                   "--fusions", "rrf,nope"])
    assert bad.exit_code == 2 and "choose among rrf, minmax, zscore, l2, dbsf" in bad.output
