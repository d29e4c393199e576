"""The command line run in-process, as a test drives it (click's ``CliRunner``)."""

from __future__ import annotations

from click.testing import CliRunner, Result


def run(*args: str) -> Result:
    """``hybrid-qpr ARGS...`` in this process; a traceback raises here instead of being printed."""
    from hybrid_qpr.cli.main import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_error_line(result: Result) -> str:
    """The output of a failed command that is exactly one ``Error: ...`` line (asserted)."""
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]
