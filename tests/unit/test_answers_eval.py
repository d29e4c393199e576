"""Per-query filters in batch mode, and answer-selection / answer-retrieval evaluation end to end."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.answer_dataset import build_answer_selection
from hybrid_qpr.data.documents import iter_batch_queries
from hybrid_qpr.errors import ConfigError, InputError
from hybrid_qpr.evaluation.tasks import get_task, query_filters_from
from hybrid_qpr.filters import filter_problem, merge_filters
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document


def test_batch_queries_carry_their_own_filter(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('plain text query\n{"id": "a", "text": "with group", "filter": {"group": "g1"}}\n'
                    '{"_id": "b", "text": "two groups", "filter": {"group": ["g1", "g2"]}}\n', encoding="utf-8")
    queries = list(iter_batch_queries(path))
    assert [(q.id, q.text, q.filter) for q in queries] == [
        ("1", "plain text query", None), ("a", "with group", {"group": "g1"}), ("b", "two groups", {"group": ["g1", "g2"]})]
    assert queries[1].line == 2


@pytest.mark.parametrize("bad, message", [
    ('{"text": "x", "filter": "g1"}', 'must be an object'),
    ('{"text": "x", "filter": {"group": {"a": 1}}}', "field 'group' must be a string"),
    ('{"text": "x", "filter": {"group": []}}', "non-empty list"),
    ('{"text": "x", "filter": {"group": true}}', "field 'group'"),
])
def test_bad_filter_line_names_file_and_line(tmp_path, bad, message):
    path = tmp_path / "q.jsonl"
    path.write_text('{"text": "fine"}\n' + bad + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"q.jsonl:2: .*{message}"):
        list(iter_batch_queries(path))


def test_merge_filters_narrows_never_widens():
    assert merge_filters(None, None) is None
    assert merge_filters({"lang": "en"}, None) == {"lang": "en"}
    assert merge_filters(None, {"group": "g"}) == {"group": "g"}
    assert merge_filters({"lang": "en"}, {"group": "g"}) == {"lang": "en", "group": "g"}
    base = {"group": ["g1", "g2"]}
    assert merge_filters(base, {"group": ["g2", "g3"]}) == {"group": "g2"}
    assert merge_filters(base, {"group": "g9"}) == {"group": []}  # nothing is allowed by both
    assert base == {"group": ["g1", "g2"]}  # inputs untouched
    assert filter_problem({"group": 5}) is None and filter_problem([1]) is not None


@pytest.fixture(scope="module")
def group_index(tmp_path_factory, committed_encoder):
    """Two groups of candidate sentences that share words, so only a filter keeps them apart."""
    docs = [Document("g1-1", "the capital of france is paris", {"group": "g1"}),
            Document("g1-2", "france has many rivers", {"group": "g1"}),
            Document("g2-1", "the capital of italy is rome", {"group": "g2"}),
            Document("g2-2", "paris and rome are capitals", {"group": "g2"})]
    idx = LocalIndex.create(tmp_path_factory.mktemp("groups") / "idx", committed_encoder)
    idx.ingest(docs, committed_encoder, show_progress=False)
    return HybridSearcher(idx, committed_encoder)


@pytest.mark.parametrize("mode", ["bm25", "knn", "hybrid", "rerank"])
def test_search_many_applies_each_query_filter(group_index, mode):
    queries = ["capital paris", "capital paris", "capital paris"]
    results = group_index.search_many(queries, mode=mode, top_k=4,
                                      query_filters=[{"group": "g1"}, {"group": "g2"}, None])
    assert {r.metadata["group"] for r in results[0]} == {"g1"}
    assert {r.metadata["group"] for r in results[1]} == {"g2"}
    assert {r.metadata["group"] for r in results[2]} == {"g1", "g2"}
    shared = group_index.search_many(queries[:1], mode=mode, top_k=4, filters={"group": "g2"},
                                     query_filters=[{"group": "g1"}])
    assert shared == [[]]  # the per-query filter narrows --filter; g1 and g2 together match nothing
    with pytest.raises(ConfigError, match="one per query"):
        group_index.search_many(queries, mode=mode, query_filters=[None])


def test_cli_batch_filter_merges_with_global_filter(tmp_path, committed_encoder):
    bank = tmp_path / "bank.jsonl"
    bank.write_text("\n".join(json.dumps(d) for d in [
        {"id": "a1", "text": "paris is in france", "group": "a", "lang": "en"},
        {"id": "a2", "text": "paris ist in frankreich", "group": "a", "lang": "de"},
        {"id": "b1", "text": "paris is a city", "group": "b", "lang": "en"}]) + "\n", encoding="utf-8")
    index = str(tmp_path / "idx")
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest", str(bank), "--index", index, "--model", str(committed_encoder.model_dir)]).exit_code == 0
    queries = '{"id": "q", "text": "paris", "filter": {"group": "a"}}\n{"id": "r", "text": "paris"}\n'
    out = runner.invoke(cli, ["query", "--queries", "-", "--index", index, "--json", "--mode", "bm25", "--filter", "lang=en"],
                        input=queries)
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.output.splitlines()]
    assert [h["id"] for h in lines[0]["hits"]] == ["a1"]
    assert sorted(h["id"] for h in lines[1]["hits"]) == ["a1", "b1"]
    bad = runner.invoke(cli, ["query", "--queries", "-", "--index", index, "--json"], input='{"text": "x", "filter": 3}\n')
    assert bad.exit_code == 1 and "<stdin>:1:" in bad.output


def test_task_metrics_by_hand():
    run = {"q1": ["d1", "d2", "d3"], "q2": ["e2", "e1"]}
    qrels = {"q1": {"d2": 1, "d3": 1}, "q2": {"e1": 1}}
    sel = get_task("answer-selection").score(run, qrels)
    # AP(q1) = (1/2 + 2/3) / 2 = 7/12, AP(q2) = 1/2; RR(q1) = 1/2, RR(q2) = 1/2
    assert sel == pytest.approx({"MAP": (7 / 12 + 0.5) / 2, "MRR": 0.5})
    ret = get_task("answer-retrieval").score(run, qrels)
    assert ret["R@1"] == 0.0 and ret["R@5"] == 1.0 and ret["MRR"] == pytest.approx(0.5)
    assert query_filters_from({"q1": "g"}, "group", ["q1"]) == {"q1": {"group": "g"}}
    with pytest.raises(ConfigError, match="no 'group'"):
        query_filters_from({}, "group", ["q1"])


def test_evaluate_and_tune_answer_selection_cli(tmp_path, committed_encoder):
    rows = ["qid\tquestion\tsentence\tlabel"]
    for g, (topic, fact) in enumerate([("paris", "paris is the capital of france"), ("rome", "rome is the capital of italy"),
                                       ("tea", "tea is made from leaves"), ("snow", "snow is frozen water")]):
        rows += [f"q{g}\twhat is {topic}\t{fact}\t1", f"q{g}\twhat is {topic}\tthe {topic} museum opens at nine\t0",
                 f"q{g}\twhat is {topic}\tnothing about it here\t0"]
    src = tmp_path / "dev.tsv"
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    build_answer_selection(src, tmp_path / "ds", split_name="val")
    beir, index = str(tmp_path / "ds" / "beir"), str(tmp_path / "idx")
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest", f"{beir}/corpus.jsonl", "--index", index, "--model",
                               str(committed_encoder.model_dir)]).exit_code == 0
    tuned = runner.invoke(cli, ["tune", "--beir", beir, "--split", "val", "--index", index, "--task", "answer-selection"])
    assert tuned.exit_code == 0, tuned.output
    assert "MAP on 4 val queries" in tuned.output
    out = runner.invoke(cli, ["evaluate", "--beir", beir, "--split", "val", "--index", index, "--task", "answer-selection",
                              "--modes", "bm25,knn,hybrid", "--out", str(tmp_path / "rep"), "--no-plot"])
    assert out.exit_code == 0, out.output
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    for mode in ("bm25", "knn", "hybrid"):
        assert set(report["results"][mode]["metrics"]) == {"MAP", "MRR"}
    # with the per-query filter every query ranks only its own 3 candidates: MAP >= 1/3 always
    assert min(r["metrics"]["MAP"] for r in report["results"].values()) >= 1 / 3
    assert "| mode | MAP | MRR |" in (tmp_path / "rep" / "report.md").read_text()


class _FixedLists:
    """A searcher whose first-stage lists are given (the tuner only fuses them)."""

    def __init__(self, lists):
        import numpy as np

        from hybrid_qpr.types import Candidates, Hit

        self.lists = {q: Candidates.of_hits([Hit(d, s) for d, s in bm25], [Hit(d, s) for d, s in knn])
                      for q, (bm25, knn) in lists.items()}
        self.encoder = type("E", (), {"encode": staticmethod(lambda texts: np.zeros((len(texts), 2), np.float32))})()

    def candidates(self, text, vector, depth, filters):
        return self.lists[text]


def test_tuned_hybrid_never_trades_mrr_for_map():
    """l2/0.5 has the best MAP (0.625 against kNN's 0.583) but a lower MRR (0.625 against
    0.667): answer selection guards both metrics, so the tuner keeps kNN's ranking instead."""
    from hybrid_qpr.evaluation.evaluator import tune

    lists = {"q1": ([("a", 5.62), ("c", 4.25), ("e", 3.96), ("b", 2.2), ("d", 1.53)],
                    [("a", 0.989), ("c", 0.857), ("d", 0.783), ("e", 0.662), ("b", 0.558)]),
             "q2": ([("c", 5.28), ("e", 4.17), ("b", 3.53), ("d", 2.26), ("a", 1.24)],
                    [("c", 0.968), ("a", 0.89), ("b", 0.766), ("d", 0.666), ("e", 0.567)])}
    qrels = {"q1": {"d": 1}, "q2": {"c": 1, "b": 1}}
    # the grid's own guard, without the untuned prior it is then weighed against (2 queries: never clear)
    result = tune(_FixedLists(lists), {"q1": "q1", "q2": "q2"}, qrels, task="answer-selection", fusions=("l2",),
                  alphas=(0.5,), prior=None)
    by_point = {(g["fusion"], g["alpha"]): g for g in result.grid}
    assert by_point[("l2", 0.5)]["MAP"] == pytest.approx(0.625) and not by_point[("l2", 0.5)]["allowed"]
    assert by_point[("rrf", 1.0)]["MRR"] == pytest.approx(2 / 3)
    assert (result.fusion, result.alpha) == ("rrf", 1.0) and result.mrr == pytest.approx(0.5833, abs=1e-4)
