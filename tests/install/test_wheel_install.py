"""A release install works: build the wheel, install it into a fresh virtualenv, and run
``ingest``, ``query`` and ``demo`` from a directory outside the source tree.

Offline by design: the wheel is built with the running interpreter's setuptools (no build
isolation), and the new virtualenv reaches the third-party dependencies through a ``.pth``
line naming this interpreter's site-packages (that directory is appended to ``sys.path`` after
the venv's own, and its ``.pth`` files - the editable install of this checkout among them - are
not run). A check then proves the wheel's declared dependencies are satisfied there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_WHEEL_BYTES = 32 * 1024 * 1024  # fast (8 MB) + quality (MiniLM int8, 23 MB) compress to ~23 MB together

pytestmark = pytest.mark.slow

DEPENDENCY_CHECK = """
import importlib.metadata as md
from packaging.requirements import Requirement
unmet = []
for line in md.requires("hybrid-qpr") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        found = md.version(req.name)
    except md.PackageNotFoundError:
        found = None
    if found is None or not req.specifier.contains(found, prereleases=True):
        unmet.append(f"{req} (found {found})")
print(unmet)
"""


def _run(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    # A clean copy, so the build never writes into the checkout (build/, *.egg-info).
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__",
                                                                  "runs", "bench-out", "train-state"))
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", dist, source], cwd=source)
    wheel = next(dist.glob("hybrid_qpr-*.whl"))
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=work)
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work).stdout.strip())
    (purelib / "shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    # --force-reinstall: the shared site-packages may hold an editable install of the same version,
    # which pip would otherwise take as "already installed" (its .pth finder is not run here)
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", "-q", wheel], cwd=work)
    outside = work / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return {"wheel": wheel, "venv": venv, "python": python, "purelib": purelib, "cwd": outside, "env": env}


def test_wheel_is_small_and_carries_the_bundled_files(installed):
    wheel = installed["wheel"]
    assert wheel.stat().st_size < MAX_WHEEL_BYTES
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("hybrid_qpr/_data/onnx/static-minilm-l6/model.onnx", "hybrid_qpr/_data/onnx/static-minilm-l6/config.json",
                   "hybrid_qpr/_data/onnx/minilm-l6-int8/model.onnx",
                   "hybrid_qpr/_data/mappings/opensearch/index.json", "hybrid_qpr/_data/examples/questions.jsonl",
                   "hybrid_qpr/_data/examples/beir/qrels/test.tsv"):
        assert needed in names
    # Every file of mappings/ and of the named models (the one source) is in the wheel, whole;
    # other model directories under onnx/ stay out of it.
    for top in ("onnx/static-minilm-l6", "onnx/minilm-l6-int8", "mappings"):
        for path in (REPO / top).rglob("*"):
            if path.is_file():
                assert f"hybrid_qpr/_data/{path.relative_to(REPO).as_posix()}" in names
    assert not any(n.endswith(".py") and n.startswith("hybrid_qpr/_data/") for n in names)
    for page_file in (REPO / "hybrid_qpr" / "workbench" / "static").iterdir():  # hybrid-qpr serve's page
        assert f"hybrid_qpr/workbench/static/{page_file.name}" in names
    models = {n.split("/")[3] for n in names if n.startswith("hybrid_qpr/_data/onnx/")}
    assert models == {"static-minilm-l6", "minilm-l6-int8"}  # --model fast (the default) and --model quality


def test_installed_package_runs_ingest_query_and_demo_outside_the_tree(installed):
    python, cwd, env = installed["python"], installed["cwd"], installed["env"]
    location = _run([python, "-c", "import hybrid_qpr, hybrid_qpr.resources as r; print(hybrid_qpr.__file__); "
                     "print(r.examples_dir()); print(r.model_dir())"], cwd=cwd, env=env).stdout.split()
    package_file, examples, model = (Path(p) for p in location)
    assert package_file.is_relative_to(installed["venv"]) and not package_file.is_relative_to(REPO)
    assert examples.is_relative_to(installed["purelib"]) and model.is_relative_to(installed["purelib"])
    # The wheel's own dependencies (no extras) resolve to installed distributions of allowed versions.
    unmet = _run([python, "-c", DEPENDENCY_CHECK], cwd=cwd, env=env).stdout.strip()
    assert unmet == "[]", unmet

    cli = installed["venv"] / "bin" / "hybrid-qpr"
    ingested = _run([cli, "ingest", examples / "questions.jsonl", "--index", "idx"], cwd=cwd, env=env)
    assert "indexed" in ingested.stdout
    answer = _run([cli, "query", "i forgot my netflix password", "--index", "idx", "--json", "-k", "3"], cwd=cwd, env=env)
    hits = json.loads(answer.stdout)["hits"]
    assert len(hits) == 3 and hits[0]["id"].startswith("netflix-password")
    # numba is a core dependency: the installed package can rank BM25 with the compiled scorer
    # (which a process loads once it pays: blockmax.compiled_scorer_pays)
    compiled = _run([python, "-c", "from hybrid_qpr.backends.local import LocalIndex, blockmax\n"
                     "assert blockmax.has_compiled_scorer()\n"
                     "hits = LocalIndex.open('idx').bm25('i forgot my netflix password', 3)\n"
                     "print(blockmax._KERNEL[0] is not None, hits[0].id)"], cwd=cwd, env=env).stdout.split()
    assert compiled[0] == "True" and compiled[1].startswith("netflix-password"), compiled
    demo = _run([cli, "demo"], cwd=cwd, env=env)
    assert "MRR@20" in demo.stdout and "hybrid" in demo.stdout
