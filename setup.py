"""Build step: copy the top-level mappings/ and examples/ directories whole, and the named
models of onnx/, into the wheel as hybrid_qpr/_data/, so an installed package carries its default model, request
bodies and demo bank (read through hybrid_qpr.resources). The top-level directories stay
the one source; the copy exists only in the build. An editable install reads them in place.
All other metadata is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED_DIRS = ("onnx", "mappings", "examples")  # keep in step with hybrid_qpr/resources.py
# Of onnx/, only the named models go into the wheel (fast, the default, and quality; keeps it
# small); other model directories there are used from a checkout with --model DIR.
# Keep in step with resources.MODEL_NAMES.
WHEEL_MODELS = ("static-minilm-l6", "minilm-l6-int8")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.py", "*.pyc", ".*")


class build_py_with_data(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the source checkout is read in place
        for name in BUNDLED_DIRS:
            source = ROOT / name
            if not source.is_dir():
                raise SystemExit(f"{source}: missing; the wheel must carry it (run the build from a full checkout or sdist)")
            target = Path(self.build_lib) / "hybrid_qpr" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            if name == "onnx":
                for model in WHEEL_MODELS:
                    shutil.copytree(source / model, target / model, ignore=SKIPPED)
            else:
                shutil.copytree(source, target, ignore=SKIPPED)


setup(cmdclass={"build_py": build_py_with_data})
