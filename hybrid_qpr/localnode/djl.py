"""PyTorch native libraries for ml-commons' DJL, from Maven Central, so the local node can
deploy ONNX text-embedding models offline (``hybrid_qpr.mlcommons``).

Why this exists (verified on OpenSearch 2.19.6 and 3.6.0, see docs/mlcommons.md): deploying an ONNX
model makes DJL's OnnxRuntime engine load PyTorch as its "alternative engine" (the
translator's array operations run there). ml-commons pins ``PYTORCH_VERSION=1.13.1`` and
``PYTORCH_PRECXX11=true`` as Java system properties, and DJL then downloads libtorch and its
JNI library from ``https://publish.djl.ai``, which a machine without internet cannot reach.
Neither the 1.13.1 ``cpu-precxx11`` libraries nor a 0.31.1 JNI for them can be fetched from
Maven Central here, but DJL reads the *environment* variable ``PYTORCH_VERSION`` before that
property, and Central has ``pytorch-native-cpu-precxx11:2.4.0`` (libtorch) and
``pytorch-jni:2.4.0-0.30.0`` (the JNI built by DJL 0.30.0 for it). Unpacked into DJL's cache
under the names DJL 0.31.1 looks for, they load without any download.

Caveat: the JNI library comes from DJL 0.30.0 while the plugin runs DJL 0.31.1. The
operations ml-commons' text-embedding path uses are checked by ``tests/cluster/test_mlcommons.py``
(cluster embeddings equal hybrid-qpr's within cosine 0.99); other DJL features are not.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from hybrid_qpr.localnode.maven import _dependency, _mvn_copy
from hybrid_qpr.errors import ClusterError

logger = logging.getLogger(__name__)

PYTORCH_VERSION = "2.4.0"
FLAVOR = "cpu-precxx11"  # ml-commons sets PYTORCH_PRECXX11=true
CLASSIFIER = "linux-x86_64"
DJL_VERSION = "0.31.1"  # the DJL in opensearch-ml 2.19.6 and 3.6.0 (plugins/opensearch-ml/api-0.31.1.jar)
JNI_BUILD = "2.4.0-0.30.0"  # pytorch-jni 2.4.0-0.31.1 / 2.5.1-0.31.1 are not fetchable here
JNI_NAME = "libdjl_torch.so"


def cache_dir(node_dir: Path) -> Path:
    """Where DJL looks: ``$DJL_CACHE_DIR/pytorch/<version>-<flavor>-<classifier>``; ml-commons sets
    ``DJL_CACHE_DIR`` to ``<path.data>/ml_cache``. ``node_dir`` is the directory holding the
    node's ``data/`` (each node of a local cluster has its own)."""
    return node_dir / "data" / "ml_cache" / "pytorch" / f"{PYTORCH_VERSION}-{FLAVOR}-{CLASSIFIER}"


def _ready(target: Path) -> bool:
    return (target / "libtorch.so").is_file() and (target / f"{DJL_VERSION}-{JNI_NAME}").is_file()


def prepare_pytorch(node_dir: Path, home: Path, mvn: str, say: Callable[[str], None] = logger.info,
                    java_home: Path | None = None) -> dict[str, str]:
    """Fill DJL's PyTorch cache of the node from Maven Central (once; ~110 MB) and return the
    environment the node must start with (``{"PYTORCH_VERSION": "2.4.0"}``).

    Returns ``{}`` (and logs a warning) when the platform is not linux x86_64 or the fetch
    fails: the node still starts, only ml-commons local models cannot be deployed."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        logger.warning("no PyTorch libraries for ml-commons on %s %s: local models cannot be deployed offline",
                       platform.system(), platform.machine())
        return {}
    target = cache_dir(node_dir)
    if _ready(target):
        return {"PYTORCH_VERSION": PYTORCH_VERSION}
    downloads = home / "downloads" / "djl-pytorch"
    native_jar = downloads / f"pytorch-native-{FLAVOR}-{PYTORCH_VERSION}-{CLASSIFIER}.jar"
    jni_jar = downloads / f"pytorch-jni-{JNI_BUILD}.jar"
    try:
        if not (native_jar.is_file() and jni_jar.is_file()):
            deps = [_dependency("ai.djl.pytorch", f"pytorch-native-{FLAVOR}", PYTORCH_VERSION, classifier=CLASSIFIER),
                    _dependency("ai.djl.pytorch", "pytorch-jni", JNI_BUILD)]
            _mvn_copy(mvn, deps, downloads, transitive=False, say=say, java_home=java_home,
                      what="PyTorch libraries for ml-commons (~110 MB)")
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".djl.", dir=target.parent))
        os.chmod(work, 0o755)
        try:
            with zipfile.ZipFile(native_jar) as jar:
                prefix = f"pytorch/{FLAVOR}/{CLASSIFIER}/"
                members = [m for m in jar.namelist() if m.startswith(prefix) and not m.endswith("/")]
                if not any(m.endswith("/libtorch.so") for m in members):
                    raise ClusterError(f"{native_jar}: no {prefix}libtorch.so inside")
                for member in members:
                    with jar.open(member) as src, open(work / Path(member).name, "wb") as dst:
                        shutil.copyfileobj(src, dst)
            with zipfile.ZipFile(jni_jar) as jar, jar.open(f"jnilib/{CLASSIFIER}/{FLAVOR}/{JNI_NAME}") as src, \
                    open(work / f"{DJL_VERSION}-{JNI_NAME}", "wb") as dst:
                shutil.copyfileobj(src, dst)
            if target.exists():
                shutil.rmtree(target)
            os.replace(work, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except (ClusterError, OSError, KeyError, zipfile.BadZipFile) as exc:
        logger.warning("ml-commons local models will not deploy on this node: PyTorch libraries for DJL could not "
                       "be prepared (%s)", exc)
        return {}
    say(f"PyTorch {PYTORCH_VERSION} libraries for ml-commons unpacked into {target}")
    return {"PYTORCH_VERSION": PYTORCH_VERSION}
