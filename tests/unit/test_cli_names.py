"""The two pipeline commands say which pipeline they manage; the old names still work, unlisted."""

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
