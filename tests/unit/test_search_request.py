"""A search is one request from every surface: each option is declared once
(``search_request.SEARCH_OPTIONS``) and reaches ``query``'s options, the workbench's OpenAPI
parameters and parser, and the resolved request every answer carries; ``resolve`` is the one
place the index's tuned defaults fill a request."""

from __future__ import annotations

import dataclasses
import json
import urllib.parse

import click
import pytest
from click.testing import CliRunner

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.search_request import (DEFAULT_ALPHA, DEFAULT_DEPTH, DEFAULT_FUSION, OPTIONS_BY_NAME, SEARCH_OPTIONS,
                                       SearchOption, SearchRequest, resolve, search_defaults)

QUERY = "how do i change my email address?"
TUNED = {"fusion": "minmax", "alpha": 0.8, "depth": 50, "bounds": {"knn": {"lower": "clip:0.3"}}}


@pytest.fixture(scope="module")
def tuned_index(tmp_path_factory, committed_encoder, question_bank):
    from hybrid_qpr.backends.local import LocalIndex

    path = tmp_path_factory.mktemp("request") / "idx"
    idx = LocalIndex.create(path, committed_encoder)
    idx.ingest(question_bank[:60], committed_encoder, show_progress=False)
    idx.set_fusion_defaults(dict(TUNED))
    yield path, idx
    idx.close()


@pytest.fixture(scope="module")
def workbench(tuned_index, committed_encoder, tmp_path_factory):
    from hybrid_qpr.search import HybridSearcher
    from hybrid_qpr.workbench.judgments import JudgmentStore
    from hybrid_qpr.workbench.service import Workbench

    return Workbench(HybridSearcher(tuned_index[1], committed_encoder),
                     JudgmentStore(tmp_path_factory.mktemp("judgments")), index="idx", backend="local")


# ---------------------------------------------------------------------- the request and resolve
def test_the_request_is_keyword_only_and_immutable():
    with pytest.raises(TypeError):
        SearchRequest(QUERY, "bm25")  # type: ignore[misc]
    request = SearchRequest(text=QUERY, mode="bm25")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.mode = "knn"  # type: ignore[misc]
    assert request.replace(mode="knn").mode == "knn" and request.mode == "bm25"


def test_resolve_fills_the_tuned_defaults_and_explicit_values_win():
    used = resolve(SearchRequest(text=QUERY), TUNED)
    assert (used.fusion, used.alpha, used.depth, used.list_depth) == ("minmax", 0.8, 50, 50)
    assert used.bounds["knn"].lower.value == 0.3 and used.reranker_depth == 0
    assert resolve(used, TUNED) == used  # a resolved request resolves to itself (run resolves every request)
    mine = resolve(SearchRequest(text=QUERY, fusion="minmax", alpha=0.2, depth=12, top_k=20), TUNED)
    assert (mine.alpha, mine.depth, mine.list_depth) == (0.2, 12, 20)  # never fewer candidates than the page
    # the tuned alpha and bounds belong to the tuned method; another method gets the package alpha
    other = resolve(SearchRequest(text=QUERY, fusion="rrf"), TUNED)
    assert (other.fusion, other.alpha, other.bounds) == ("rrf", DEFAULT_ALPHA, {})
    # the modes that do not fuse keep the package defaults
    plain = resolve(SearchRequest(text=QUERY, mode="bm25"), TUNED)
    assert (plain.fusion, plain.alpha, plain.depth) == (DEFAULT_FUSION, DEFAULT_ALPHA, DEFAULT_DEPTH)
    assert resolve(SearchRequest(text=QUERY, mode="rerank"), {}).mode == "rescore"
    assert search_defaults() == {"mode": "hybrid", "top_k": 10, "fusion": DEFAULT_FUSION, "alpha": DEFAULT_ALPHA,
                                 "depth": DEFAULT_DEPTH}


@pytest.mark.parametrize("changes, words", [
    (dict(top_k=0), "top_k=0: must be >= 1"), (dict(offset=-1), "offset=-1: must be >= 0"),
    (dict(depth=0), "depth=0: must be >= 1"), (dict(autocut=-1), "autocut=-1: must be >= 0 (0 = off)"),
    (dict(rescore_depth=0), "rescore_depth=0: must be >= 1"), (dict(fusion="max"), "fusion='max'"),
    (dict(alpha=1.5), "alpha=1.5"), (dict(mode="fuzzy"), "mode='fuzzy'"),
    (dict(fusion="rrf", bounds={"knn": {"lower": "clip:0.3"}}), "bounds apply to minmax fusion only"),
    (dict(reranker_depth=-1), "reranker_depth=-1"),
])
def test_resolve_names_a_bad_setting(changes, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        resolve(SearchRequest(text=QUERY, **changes), {})


def test_run_answers_with_the_resolved_request(tuned_index, committed_encoder):
    from hybrid_qpr.search import HybridSearcher

    searcher = HybridSearcher(tuned_index[1], committed_encoder)
    results, used = searcher.run(SearchRequest(text=QUERY, top_k=3))
    assert (used.fusion, used.alpha, used.depth) == ("minmax", 0.8, 50) and len(results) == 3
    assert [r.id for r in results] == [r.id for r in searcher.search(QUERY, top_k=3)]  # the library's call is the same
    assert searcher.request(QUERY, top_k=3).settings() == used.settings()


# ---------------------------------------------------------------------- one declaration, every surface
def test_every_declared_option_reaches_the_cli_the_api_and_the_page(workbench):
    from hybrid_qpr.cli.query import query
    from hybrid_qpr.workbench.openapi import openapi_spec
    from hybrid_qpr.workbench.service import COMPARE_OWN

    help_text = CliRunner().invoke(query, ["--help"], terminal_width=200).output
    spec = openapi_spec()["paths"]
    searched = {p["name"]: p for p in spec["/api/search"]["get"]["parameters"]}
    compared = {p["name"] for p in spec["/api/compare"]["get"]["parameters"]}
    search = workbench.search(QUERY, k=3)
    compare = workbench.compare(QUERY, k=3)  # what the page shows
    request_fields = {f.name for f in dataclasses.fields(SearchRequest)}
    defaults = {f.name: f.default for f in dataclasses.fields(SearchRequest)}
    for option in SEARCH_OPTIONS:
        assert option.name in request_fields and defaults[option.name] == option.default, option.name
        assert all(flag in help_text for flag in option.cli_flags), option.name
        assert option.api_name in searched, option.name
        assert (option.api_name in compared) == (option.name not in COMPARE_OWN), option.name
        assert option.help in searched[option.api_name]["description"], option.name
        assert option.name in search["request"] and option.name in compare["request"], option.name
    # the CLI's request options are exactly the declared ones (none added by hand beside them)
    cli_fields = {p.name for p in query.params} & request_fields
    # besides them: the text, the filters and the reranker's depth (a searcher option)
    assert cli_fields == set(OPTIONS_BY_NAME) | {"text", "filters", "reranker_depth"}
    assert (compare["request"]["fusion"], compare["request"]["alpha"]) == ("minmax", 0.8)


def test_a_new_option_is_derived_for_the_cli_and_the_api():
    from hybrid_qpr.cli.query import click_option
    from hybrid_qpr.workbench.openapi import _option
    from hybrid_qpr.workbench.service import Limits, parse_options

    widgets = SearchOption("widgets", int, "Widgets per hit.", default=2, minimum=1, maximum=9)

    @click.command()
    @click_option(widgets)
    def command(widgets):
        click.echo(f"widgets={widgets}")

    runner = CliRunner()
    assert runner.invoke(command, ["--widgets", "4"]).output == "widgets=4\n"
    assert runner.invoke(command, []).output == "widgets=2\n"
    refused = runner.invoke(command, ["--widgets", "10"])
    assert refused.exit_code == 2 and "1<=x<=9" in refused.output
    assert "Widgets per hit." in runner.invoke(command, ["--help"]).output
    param = _option(widgets, Limits())
    assert param["name"] == "widgets" and param["schema"] == {"type": "integer", "minimum": 1, "maximum": 9,
                                                              "default": 2}
    # the API's parser reads every declared option by its parameter name, typed
    assert parse_options({"k": "4", "depth": "40", "server_side": "false", "fusion": "l2", "alpha": "0.25"}) == {
        "top_k": 4, "depth": 40, "server_side": False, "fusion": "l2", "alpha": 0.25}


def test_query_json_shows_the_request_it_used(tuned_index):
    from hybrid_qpr.cli.main import cli

    result = CliRunner().invoke(cli, ["query", QUERY, "--index", str(tuned_index[0]), "--json", "-k", "3",
                                      "--autocut", "1"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    used = answer["request"]
    assert (used["fusion"], used["alpha"], used["depth"], used["autocut"], used["top_k"]) == ("minmax", 0.8, 50, 1, 3)
    assert used["bounds"] == {"knn": {"lower": "clip:0.3"}} and answer["mode"] == used["mode"] == "hybrid"


def test_the_api_takes_every_option_and_answers_with_the_request(tuned_index, committed_encoder, tmp_path):
    from hybrid_qpr.testing.workbench import call, served

    with served(tuned_index[1], committed_encoder, tmp_path / "judgments", index="idx", kind="local") as url:
        def get(route, **params):
            return call(f"{url}/api/{route}?" + urllib.parse.urlencode({"q": QUERY, **params}))

        status, body = get("search", depth=40, autocut=1, rescore_depth=5, k=4, fusion="rrf")
        assert status == 200, body
        assert {k: body["request"][k] for k in ("depth", "autocut", "rescore_depth", "top_k", "fusion", "alpha")} == {
            "depth": 40, "autocut": 1, "rescore_depth": 5, "top_k": 4, "fusion": "rrf", "alpha": DEFAULT_ALPHA}
        status, body = get("compare", depth=45, k=3)
        assert status == 200 and body["request"]["depth"] == 45 and body["settings"]["depth"] == 45
        for params, expected, words in ((dict(depth=0), 422, "depth=0"), (dict(autocut="x"), 400, "autocut='x'"),
                                        (dict(server_side="maybe"), 400, "server_side='maybe'"),
                                        (dict(server_side="true"), 422, "OpenSearch")):
            status, body = get("search", **params)
            assert status == expected and words in body["error"], (params, body)
        status, health = call(f"{url}/api/health")
        assert health["defaults"] == search_defaults()
