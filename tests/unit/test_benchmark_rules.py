"""The rules benchmark scripts and the testing tools keep: a benchmark runs as
``python benchmarks/X.py`` with the package installed, so it never edits ``sys.path``, imports
nothing from tests/, only public names of hybrid_qpr, and of benchmarks/ only modules that
exist there (``_common`` for what several share); nothing in the package imports
``hybrid_qpr.testing``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))
TEST_MODULES = {p.stem for p in (REPO / "tests").rglob("*.py")}


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = {p.stem for p in BENCHMARKS}
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            found.append(f"{where}: sys.path")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and getattr(node.value, "id", None) != "self":
            found.append(f"{where}: private attribute {node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top == "hybrid_qpr":
                private = [a.name for a in node.names if a.name.startswith("_")]
                private += [part for part in node.module.split(".") if part.startswith("_")]
                if private:
                    found.append(f"{where}: private name {', '.join(private)} of {node.module}")
            elif top in ("tests", "benchmarks") or (top in TEST_MODULES and top not in local):
                found.append(f"{where}: imports {node.module} (a script imports hybrid_qpr, and benchmarks/ "
                             "modules by their own name, never tests/)")
            elif (top.startswith("bench") or top.startswith("_") and top != "__future__") and top not in local:
                found.append(f"{where}: imports {node.module}, which benchmarks/ does not hold")
        elif isinstance(node, ast.Import):
            found += [f"{where}: imports {a.name}" for a in node.names if a.name.split(".")[0] in ("tests", "benchmarks")]
    return found


def test_benchmarks_import_only_the_installed_package_and_their_common_module():
    assert len(BENCHMARKS) > 10
    problems = [p for path in BENCHMARKS for p in _problems(path)]
    assert not problems, "\n".join(problems)


def test_nothing_in_the_package_imports_the_testing_tools():
    importers = []
    for path in (REPO / "hybrid_qpr").rglob("*.py"):
        if "testing" in path.relative_to(REPO / "hybrid_qpr").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(m.startswith("hybrid_qpr.testing") for m in modules):
                importers.append(str(path.relative_to(REPO)))
    assert not importers


@pytest.mark.slow
@pytest.mark.parametrize("script", [p.name for p in BENCHMARKS if not p.name.startswith("_")])
def test_every_benchmark_starts(script, tmp_path):
    """``--help`` from a directory outside the checkout: imports resolve through the installed
    package and the script's own folder only."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout
