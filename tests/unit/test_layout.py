"""The house rules that a refactor could silently break: the package's import graph has no
cycles (text and backends never reach into data), every bundled file is found through
hybrid_qpr.resources, committed benchmark results and models name no machine's absolute paths, and
tests/unit holds only tests that need no search node, browser or torch."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from hybrid_qpr import resources

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "hybrid_qpr"


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _import_graph() -> dict[str, set[str]]:
    """Top-level unit (subpackage or module) -> the units it imports, lazy imports included."""
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = _unit(".".join(path.relative_to(REPO).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hybrid_qpr"):
                targets = [node.module] if node.module != "hybrid_qpr" else [f"hybrid_qpr.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("hybrid_qpr")]
            else:
                continue
            edges.setdefault(source, set()).update(t for t in map(_unit, targets) if t != source)
    return edges


def test_no_import_cycles_between_subpackages():
    edges = _import_graph()
    assert "data" not in edges.get("text", set()) and "data" not in edges.get("backends", set())
    for start in edges:
        seen, stack = set(), list(edges[start])
        while stack:
            unit = stack.pop()
            assert unit != start, f"import cycle through {start}"
            if unit not in seen:
                seen.add(unit)
                stack.extend(edges.get(unit, ()))


def _documented_dependencies() -> dict[str, set[str]]:
    """The unit -> units list in docs/ARCHITECTURE.md."""
    import re

    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^(\w+)\s+->\s+(.*)$", text, re.M)
    return {unit: set() if "nothing" in deps else set(deps.split()) for unit, deps in rows}


def _units() -> set[str]:
    """Every top-level unit of the package: its subpackages and modules (``__init__`` for the package itself)."""
    return {_unit(".".join(path.relative_to(REPO).with_suffix("").parts)) for path in PACKAGE.rglob("*.py")
            if path.parent == PACKAGE or (PACKAGE / path.relative_to(PACKAGE).parts[0] / "__init__.py").is_file()}


def test_architecture_doc_lists_exactly_the_imports_of_every_unit():
    """docs/ARCHITECTURE.md's dependency list is the import graph: every unit is listed, with
    each unit it imports and none it does not (an edge the code dropped is an error too)."""
    documented = _documented_dependencies()
    graph = _import_graph()
    units = _units()
    assert units - set(documented) == set(), f"units missing from docs/ARCHITECTURE.md: {sorted(units - set(documented))}"
    assert set(documented) <= units, f"docs/ARCHITECTURE.md lists units the package has not: {sorted(set(documented) - units)}"
    for unit in sorted(units):
        imports, listed = graph.get(unit, set()), documented[unit]
        assert imports <= listed, f"{unit} imports {sorted(imports - listed)}: add it to docs/ARCHITECTURE.md (or drop the import)"
        assert listed <= imports, f"docs/ARCHITECTURE.md says {unit} imports {sorted(listed - imports)}, which it does not"


def test_bundled_files_resolve_from_the_checkout():
    assert (resources.model_dir() / "model.onnx").is_file()
    assert resources.mapping_file("opensearch/index.json").is_file()
    assert (resources.examples_dir() / "beir" / "qrels" / "test.tsv").is_file()


def _strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def test_committed_results_hold_no_absolute_paths():
    files = [*(REPO / "benchmarks" / "results").rglob("*.json"), *(REPO / "docs").glob("*.json")]
    assert files
    for path in files:
        for text in _strings(json.loads(path.read_text(encoding="utf-8"))):
            words = text.split()
            assert not any(w.startswith(("/work/", "/tmp/", "/home/", "/root/")) for w in words), f"{path}: {text}"


MACHINE_PATHS = (b"/root/", b"/home/", b".venv", b"site-packages", b"/work/", b"/tmp/")


def test_committed_models_hold_no_machine_paths():
    """Exporters write stack traces with the export machine's paths into ONNX files; the
    export strips them (hybrid_qpr.export.clean) and no committed model may carry one."""
    models = sorted((REPO / "onnx").rglob("*.onnx"))
    assert models
    for path in models:
        data = path.read_bytes()
        found = [word.decode() for word in MACHINE_PATHS if word in data]
        assert not found, f"{path.relative_to(REPO)} holds {found}: strip it with hybrid_qpr.export.clean.clean_onnx_file"


# What moves a test file out of tests/unit (the fast path: a core install, no node): a search
# node (tests/cluster), a browser (tests/browser), torch or onnx (tests/training).
HEAVY_NEED = re.compile(r"pytest\.mark\.(cluster|multinode|secure|browser|torch)\b"
                        r"|importorskip\(\"(torch|onnx|transformers)\"\)|^\s*(import|from) (torch|onnx)\b", re.M)


def test_unit_tests_need_no_node_browser_or_torch():
    tests = REPO / "tests"
    assert [p.name for p in tests.glob("*.py")] == ["conftest.py"], "a test file belongs in a folder of tests/"
    for path in sorted((tests / "unit").glob("*.py")):
        found = HEAVY_NEED.search(path.read_text(encoding="utf-8"))
        assert not found, f"{path.name} needs {found.group(0).strip()!r}: move it to tests/cluster, browser or training"
