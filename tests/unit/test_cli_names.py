"""Names say one thing: the pipeline commands say which pipeline they manage, the node commands are
``node`` (old names still work, unlisted), and the fusion method is ``fusion=`` everywhere."""

from __future__ import annotations

from click.testing import CliRunner

from hybrid_qpr.cli.main import cli


def _help(args):
    result = CliRunner().invoke(cli, [*args, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_search_and_ingest_pipeline_names_and_hidden_aliases():
    assert "hybrid-qpr-<fusion> search pipelines" in _help(["search-pipeline", "install"])
    assert "hybrid-qpr-<fusion> search pipelines" in _help(["pipeline", "install"])
    assert "ingest pipeline" in _help(["mlcommons", "ingest-pipeline"])
    assert "ingest pipeline" in _help(["mlcommons", "pipeline"])
    top = _help([])
    assert "search-pipeline" in top and "\n  pipeline " not in top
    group = _help(["mlcommons"])
    assert "ingest-pipeline" in group and "\n  pipeline " not in group


def test_help_points_a_wheel_user_at_nothing_in_a_checkout():
    """An installed package has no examples/ or onnx/ beside it: the help texts name the
    bundled files as bundled, and the top-level help names every backend."""
    from hybrid_qpr.cli.main import COMMANDS

    top = _help([])
    assert "OpenSearch" in top and "Elasticsearch" in top
    for name in COMMANDS:
        text = _help([name])
        assert "examples/" not in text and "committed in onnx" not in text, name


def test_node_commands_are_listed_as_node_and_the_old_cluster_name_still_works():
    """``cluster`` read as the paraphrase clusters or a remote search cluster; the local-node
    commands are ``node`` now, and old scripts calling ``hybrid-qpr cluster ...`` keep working."""
    top = _help([])
    assert "\n  node " in top and "\n  cluster " not in top
    assert "--nodes INTEGER" in _help(["node", "start"])
    assert _help(["cluster", "start"]) == _help(["node", "start"]).replace("cli node start", "cli cluster start")


def test_the_fusion_method_is_passed_as_fusion_everywhere():
    """One name for one parameter, as the CLI's ``--fusion`` (docs/ARCHITECTURE.md, "Words we use")."""
    import inspect

    from hybrid_qpr import fusion
    from hybrid_qpr.backends.base import ServerSideBackend
    from hybrid_qpr.backends.opensearch import OpenSearchBackend
    from hybrid_qpr.evaluation.evaluator import tune, tune_candidates, tuning_request
    from hybrid_qpr.evaluation.tuning import tune_index
    from hybrid_qpr.search import HybridSearcher

    for function in (fusion.fuse, fusion.check_fusion, tuning_request, HybridSearcher.search,
                     ServerSideBackend.hybrid_server, OpenSearchBackend.hybrid_server):
        parameters = inspect.signature(function).parameters
        assert "fusion" in parameters and "method" not in parameters, function.__qualname__
    for function in (tune, tune_candidates, tune_index):
        parameters = inspect.signature(function).parameters
        assert "fusions" in parameters and "methods" not in parameters, function.__qualname__
