"""A missing optional package gives one line naming the real PyPI package, not a traceback.

Each command runs in a fresh interpreter with the package blocked (``sys.modules[name] = None``
makes ``import name`` fail as if it were not installed), the way test_model_cnn blocks torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hybrid_qpr.errors import MissingDependencyError, require


def _run_blocked(blocked: str | tuple[str, ...], args: list[str], cwd) -> subprocess.CompletedProcess:
    names = (blocked,) if isinstance(blocked, str) else blocked
    code = ("import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in names) +
            "from hybrid_qpr.cli.main import cli\n"
            f"cli({args!r}, prog_name='hybrid-qpr')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("command", [["train", "DIR", "--out", "run"], ["finetune", "DIR", "--out", "run"],
                                     ["export", "DIR", "--kind", "cnn", "--out", "model"]])
def test_training_commands_without_torch_say_what_to_install(tmp_path, command):
    (tmp_path / "DIR").mkdir()
    done = _run_blocked("torch", command, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"'hybrid-qpr {command[0]}' needs the 'torch' package" in lines[0]
    assert "pip install torch (or pip install 'hybrid-qpr[train]')" in lines[0]


def test_mlcommons_register_without_onnx_says_what_to_install(tmp_path):
    (tmp_path / "model").mkdir()
    done = _run_blocked("onnx", ["mlcommons", "register", "model", "--opensearch", "http://127.0.0.1:9"], tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "needs the 'onnx' package" in done.stderr and "pip install onnx" in done.stderr


@pytest.mark.parametrize("blocked", ["starlette", "uvicorn"])
def test_serve_without_its_extra_says_what_to_install(tmp_path, blocked):
    pytest.importorskip({"starlette": "uvicorn", "uvicorn": "starlette"}[blocked])  # the other one is there
    done = _run_blocked(blocked, ["serve", "--index", "idx"], tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"'hybrid-qpr serve' needs the '{blocked}' package" in done.stderr
    assert f"pip install {blocked} (or pip install 'hybrid-qpr[serve]')" in done.stderr


def test_serve_names_every_missing_package_at_once(tmp_path):
    done = _run_blocked(("starlette", "uvicorn"), ["serve", "--index", "idx"], tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "'hybrid-qpr serve' needs the 'starlette' and 'uvicorn' packages, which are not installed" in line
    assert "pip install starlette uvicorn (or pip install 'hybrid-qpr[serve]')" in line


@pytest.mark.parametrize("module, distribution", [("faiss", "faiss-cpu"), ("opensearchpy", "opensearch-py"),
                                                  ("torch", "torch"), ("onnx", "onnx"), ("elasticsearch", "elasticsearch")])
def test_install_hints_name_the_pypi_package(monkeypatch, module, distribution):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError, match=f"needs the '{distribution}' package.*pip install {distribution}"):
        require(module, feature="this test")
