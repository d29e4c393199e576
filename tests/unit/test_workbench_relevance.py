"""The workbench's relevance API on a real uvicorn server over the examples/ bank in a local
index: /api/significance after judging queries as the bank's qrels say, /api/overlap on pasted
queries, and their refusals."""

from __future__ import annotations

import pytest

from hybrid_qpr.testing.workbench import call, examples_local_index, judge_bank, served

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def api(tmp_path_factory, committed_encoder):
    root = tmp_path_factory.mktemp("wb-relevance")
    index = examples_local_index(root / "idx", committed_encoder)
    with served(index, committed_encoder, root / "judgments", index="examples", kind="local") as url:
        yield f"{url}/api"


def test_significance_needs_judgments_then_tests_every_mode(api):
    status, answer = call(f"{api}/significance")
    assert status == 422 and "at least 2 queries" in answer["error"]
    judged = judge_bank(api, 12)
    status, answer = call(f"{api}/significance?baseline=bm25&metric=MRR@20")
    assert status == 200, answer
    assert answer["queries"] == 12 and answer["metric"] == "MRR@20" and list(answer["metrics"]) == ["bm25", "knn", "hybrid"]
    for c in answer["comparisons"]:
        assert c["baseline"] == "bm25" and c["wins"] + c["losses"] + c["ties"] == 12
        assert 0 < c["randomization_p"] <= c["randomization_p_holm"] <= 1
        deltas = [row["delta"] for row in c["per_query"]]
        assert deltas == sorted(deltas) and all(row["text"] in judged.values() for row in c["per_query"])
        assert "little power" in c["verdict"]  # 12 queries
    status, tuned = call(f"{api}/tune", "POST", {"store": False})
    assert status == 200 and tuned["gain"]["over"] in ("bm25", "knn") and tuned["gain"]["queries"] == 12
    assert tuned["gain"]["low"] <= tuned["gain"]["delta"] <= tuned["gain"]["high"] and "95% CI" in tuned["gain"]["sentence"]
    assert call(f"{api}/significance?baseline=rerank")[0] == 422
    assert call(f"{api}/significance?metric=P@5")[0] == 422


def test_overlap_of_two_configurations(api):
    body = {"queries": "how do i reset my netflix password\ncheapest way to fly to lisbon\n\n", "a": "hybrid",
            "b": "bm25", "k": 5}
    status, answer = call(f"{api}/overlap", "POST", body)
    assert status == 200, answer
    assert answer["queries"] == 2 and answer["k"] == 5 and len(answer["changed"]) == 2
    assert answer["changed"][0]["rbo"] <= answer["changed"][1]["rbo"]
    status, same = call(f"{api}/overlap", "POST", {**body, "b": "hybrid"})
    assert same["rbo"] == pytest.approx(1.0) and same["jaccard"] == 1.0
    for bad, code in (({"queries": []}, 400), ({**body, "a": "fast"}, 422), ({**body, "k": 0}, 422),
                      ({**body, "b": "knn,index=/tmp/x"}, 422), ({**body, "extra": 1}, 422),
                      ({"queries": ["q"] * 2 + [f"q{i}" for i in range(600)]}, 413)):
        status, answer = call(f"{api}/overlap", "POST", bad)
        assert status == code and "\n" not in answer["error"], (bad, answer)
