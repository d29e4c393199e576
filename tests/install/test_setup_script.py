"""What ``scripts/setup`` installs, on a PATH whose installers only record their calls:
``--node`` brings the Elasticsearch client (both engines' commands work), a re-run with the
same extras does not run pip again, setuptools' editable-install warning is filtered, and the
closing hints name only what was not set up."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# every tool the script calls: each records its call and succeeds; the virtualenv's python
# reports hybrid-qpr installed once pip has installed it (the script's ``installed`` check)
RECORDER = '#!/bin/sh\necho "{name} $* | PYTHONWARNINGS=$PYTHONWARNINGS" >> "{calls}"\n'
VENV_PYTHON = RECORDER + '''case "$1" in
  -I) [ -f "{tree}/.installed" ] && exit 0 || exit 1 ;;
  -m) case "$*" in *" -e "*) touch "{tree}/.installed" ;; esac ;;
esac
exit 0
'''
JAVA = RECORDER + 'echo \'openjdk version "21.0.2"\' >&2\n'
NODE_JAVA = RECORDER + 'echo /opt/jdk-21\n'


@pytest.fixture()
def sandbox(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "setup", tmp_path / "scripts" / "setup")
    calls = tmp_path / ".calls"
    stubs, venv_bin = tmp_path / ".stubs", tmp_path / "venv" / "bin"
    stubs.mkdir()
    venv_bin.mkdir(parents=True)
    scripts = {stubs / "python3": RECORDER + "exit 0\n", stubs / "java": JAVA, stubs / "mvn": RECORDER,
               stubs / "apt-get": RECORDER, venv_bin / "python": VENV_PYTHON, venv_bin / "hybrid-qpr": NODE_JAVA}
    for path, text in scripts.items():
        path.write_text(text.format(name=path.name, calls=calls, tree=tmp_path))
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "PYTHON": str(stubs / "python3"),
           "HYBRID_QPR_VENV": str(tmp_path / "venv")}
    env.pop("HYBRID_QPR_EXTRAS", None)
    return tmp_path, env, calls


def _setup(tree: Path, env: dict, *flags: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "scripts/setup", *flags], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def test_node_installs_both_clients_once_and_hints_only_what_is_missing(sandbox):
    tree, env, calls = sandbox
    done = _setup(tree, env, "--node")
    installs = [line for line in calls.read_text().splitlines() if " -e " in line]
    assert len(installs) == 1 and "-e .[serve,elasticsearch] " in installs[0]
    assert "PYTHONWARNINGS=ignore:Editable installation" in installs[0]  # setuptools' folder warning
    assert " -q " not in installs[0]  # pip shows what it fetches
    assert "Elasticsearch node runs on /opt/jdk-21" in done.stderr
    hints = done.stderr.splitlines()[-1]
    assert "scripts/setup --train" in hints and "--node" not in hints
    calls.unlink()
    again = _setup(tree, env, "--node")  # the same extras are installed: no pip at all
    assert not [line for line in calls.read_text().splitlines() if "pip install" in line]
    assert "is installed in" in again.stderr and "already" in again.stderr


def test_without_node_the_hint_names_it(sandbox):
    tree, env, calls = sandbox
    done = _setup(tree, env)
    assert "-e .[serve] " in calls.read_text()
    assert done.stderr.splitlines()[-1].endswith("local search nodes: scripts/setup --node")
