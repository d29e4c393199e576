"""Every command the README shows is run: by this file or by CI.

Each fenced block of the README is preceded by a marker saying who runs it:

* ``local`` - run here, in order, in one temporary directory (with the repository's
  ``examples/``), by ``bash -eu`` with ``hybrid-qpr`` on the PATH;
* ``python`` - run here with the package's interpreter, after the local blocks;
* ``slow`` - run here after the local blocks (training), under the ``slow`` marker;
* ``cluster`` - run here against the test OpenSearch node; its ``hybrid-qpr node`` lines are
  the ones ``scripts/test`` runs to start and stop that node;
* ``ci`` - install and test commands, each checked to be what CI's ``scripts/test`` (or the
  wheel test) runs.

Links between the Markdown files (and their anchors) are checked too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKED_BLOCK = re.compile(r"<!-- readme-test: (\w+) -->\n```(\w+)\n(.*?)```", re.S)
KINDS = ("local", "python", "slow", "cluster", "ci")


def blocks(kind: str) -> list[str]:
    return [body for marker, _, body in MARKED_BLOCK.findall(README.read_text(encoding="utf-8")) if marker == kind]


def commands(block: str) -> list[str]:
    """The block's command lines, comments and heredoc bodies left out."""
    out, heredoc = [], None
    for line in block.splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            out.append(command)
            found = re.search(r"<<'?(\w+)'?", command)
            heredoc = found.group(1) if found else None
    return out


@pytest.fixture()
def workdir(tmp_path):
    """A directory with the repository's examples/ and a PATH whose hybrid-qpr is this checkout's."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    launcher = bin_dir / "hybrid-qpr"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "from hybrid_qpr.cli.main import cli; cli()" "$@"\n')
    launcher.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return tmp_path, env


def run_bash(script: str, cwd: Path, env: dict) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}\n{script}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_block_says_who_runs_it():
    text = README.read_text(encoding="utf-8")
    fences = len(re.findall(r"^```\w+$", text, re.M))
    marked = MARKED_BLOCK.findall(text)
    assert len(marked) == fences, "a README code block has no '<!-- readme-test: KIND -->' line before it"
    assert {marker for marker, _, _ in marked} <= set(KINDS)
    assert all(blocks(kind) for kind in KINDS)


def test_local_blocks_and_the_library_snippet_run(workdir):
    cwd, env = workdir
    out = run_bash("\n".join(blocks("local")), cwd, env)
    assert "| hybrid |" in out and "indexed 4, updated 0" in out and "stored as the default fusion" in out
    assert (cwd / "report" / "report.json").is_file()
    [snippet] = blocks("python")
    done = subprocess.run([sys.executable, "-c", snippet], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("pw-")  # a password question first


@pytest.mark.slow
@pytest.mark.torch
def test_training_block_runs(workdir):
    pytest.importorskip("torch")
    cwd, env = workdir
    run_bash("\n".join(blocks("local") + blocks("slow")), cwd, env)
    assert (cwd / "models" / "support-cnn" / "model.onnx").is_file()


@pytest.mark.cluster
def test_cluster_block_runs(workdir, opensearch_url):
    cwd, env = workdir
    [block] = blocks("cluster")
    lines = commands(block)
    node_lines = [line for line in lines if line.startswith("hybrid-qpr node ")]
    ci_script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    for line in node_lines:  # the local node's start and stop are what scripts/test runs around the suite
        assert f"hybrid-qpr node {line.split()[2]} --engine" in ci_script, line
    index = f"hqpr-readme-{uuid.uuid4().hex[:8]}"
    own = [re.sub(r"--index questions\b", f"--index {index}", line) for line in lines if line not in node_lines]
    questions = next(b for b in blocks("local") if "cat > questions.jsonl" in b)
    env = {**env, "HYBRID_QPR_OPENSEARCH_URL": opensearch_url}
    try:
        out = run_bash(questions + "\n" + "\n".join(own), cwd, env)
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{opensearch_url}/{index}", method="DELETE"), timeout=30).read()
    assert "verified 4 ids" in out and "pw-" in out


def test_install_and_test_commands_are_what_ci_runs():
    setup = (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    ci_test = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    wheel_test = (ROOT / "tests" / "install" / "test_wheel_install.py").read_text(encoding="utf-8")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])
    all_extras = set(re.search(r"^ALL_EXTRAS=(\S+)", setup, re.M).group(1).split(","))
    where = {  # README command -> (file that runs it, the text there)
        "scripts/setup": (ci_test, "\nscripts/setup --all --node"),
        "source .venv/bin/activate": (ci_test, '\nsource "$VENV/bin/activate"'),
        "scripts/setup --all --node": (ci_test, "\nscripts/setup --all --node"),
        'python -m pytest -m "not cluster and not slow"': (ci_test, 'python -m pytest -q "$@"'),
        "python -m pytest tests/unit": (ci_test, 'python -m pytest -q "$@"'),
        "scripts/test": ((ROOT / ".ci" / "run").read_text(encoding="utf-8"), "exec scripts/test"),
    }
    shown = [line for block in blocks("ci") for line in commands(block)]
    assert set(shown) == set(where), "a README ci command is not mapped to what runs it"
    for line in shown:
        text, needle = where[line]
        assert needle in text, line
    assert all_extras <= extras and "train" in all_extras
    extras_table = README.read_text(encoding="utf-8").split("| extra | adds | for |")[1].split("\n\n")[0]
    table = set(re.findall(r"^\| `(\w+)` \|", extras_table, re.M))
    assert table == extras, f"README extras table {sorted(table)} vs pyproject {sorted(extras)}"


def test_the_install_options_are_real():
    """Each command of the Install section's options table: a scripts/setup option the script
    accepts, or the pip command that scripts/setup and the wheel test run, with real extras."""
    setup = (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    wheel_test = (ROOT / "tests" / "install" / "test_wheel_install.py").read_text(encoding="utf-8")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])
    install = README.read_text(encoding="utf-8").split("## Install")[1].split("| extra | adds | for |")[0]
    rows = [line for line in install.splitlines() if line.startswith("| ") and "`" in line.split("|")[-2]]
    commands = [c for row in rows for c in re.findall(r"`([^`]+)`", row.split("|")[-2])]
    assert len(rows) >= 4 and any(c.startswith("scripts/setup --train") for c in commands)
    accepted = set(re.findall(r"^\s+(?:-\w\|)?(--[\w-]+)\)", setup, re.M))
    for command in commands:
        if command.startswith("scripts/setup"):
            assert set(command.split()[1:]) <= accepted, f"{command}: scripts/setup accepts {sorted(accepted)}"
        elif command.startswith("pip install "):
            assert 'pip install --no-cache-dir -e "$target"' in setup
            named = re.search(r"\.\[([\w,]+)\]", command)
            assert not named or set(named.group(1).split(",")) <= extras, command
        else:
            assert command == "pip wheel --no-deps -w dist ." and '"pip", "wheel", "--no-deps"' in wheel_test, command


def test_quick_start_runs_in_the_environment_the_install_block_makes():
    install = "\n".join(blocks("ci")[0].splitlines())
    assert "source .venv/bin/activate" in install
    quick = README.read_text(encoding="utf-8").split("## Quick start")[1].split("<!-- readme-test")[0]
    assert "activated `.venv`" in quick


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = _slug(heading)
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_links_between_the_docs_resolve():
    broken = []
    for md in [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists():
                broken.append(f"{md.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{md.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_readme_stays_a_product_page():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 250
