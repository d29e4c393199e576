"""Every script answers --help with its own text and does nothing else: no install, no node."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("scripts/setup", "scripts/test", ".ci/run")
# What a script would call to install or start something: each is replaced by a recorder.
SIDE_EFFECTS = ("python", "python3", "pip", "hybrid-qpr", "apt-get", "mvn", "java", "docker")


@pytest.fixture()
def sandbox(tmp_path):
    """A copy of the scripts in an empty tree, and a PATH on which every installer only records its call."""
    for script in SCRIPTS:
        (tmp_path / script).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / script, tmp_path / script)
    stubs = tmp_path / ".stubs"
    stubs.mkdir()
    calls = tmp_path / ".calls"
    for name in SIDE_EFFECTS:
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 1\n')
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "PYTHON": str(stubs / "python3"),
           "HYBRID_QPR_VENV": str(tmp_path / "venv")}
    return tmp_path, env, calls


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_header_and_changes_nothing(sandbox, script, flag):
    tree, env, calls = sandbox
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    done = subprocess.run(["bash", script, flag], cwd=tree, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not calls.exists(), f"{script} {flag} ran: {calls.read_text()}"
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
    header = re.findall(r"^# ?(.*)$", (ROOT / script).read_text(encoding="utf-8").split("\nset -euo")[0], re.M)[1:]
    assert done.stdout.splitlines() == header
    assert "--help" in done.stdout


def test_the_scripts_name_only_commands_that_hybrid_qpr_help_lists():
    """Not an old alias that still works but that ``hybrid-qpr --help`` does not list."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    listed = set(re.findall(r"^  (\w[\w-]*) ", CliRunner().invoke(cli, ["--help"]).output, re.M))
    for script in SCRIPTS:
        # a command line: at a line's start, after a quote or $VENV/bin/ (not "hybrid-qpr in a virtualenv")
        text = (ROOT / script).read_text(encoding="utf-8")
        named = set(re.findall(r"(?:^\s*|['/])hybrid-qpr\"? (\w[\w-]*)", text, re.M))
        assert named <= listed, f"{script} names 'hybrid-qpr {sorted(named - listed)}', not in hybrid-qpr --help"


def test_setup_refuses_an_unknown_option_before_doing_anything(sandbox):
    tree, env, calls = sandbox
    done = subprocess.run(["bash", "scripts/setup", "--no-such-option"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "unknown option --no-such-option" in done.stderr
    assert not calls.exists()
