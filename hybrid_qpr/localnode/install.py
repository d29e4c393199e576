"""Installing a node directory: the server zip unpacked, missing modules rebuilt from their jars
(OpenSearch 2.19 only), the plugins installed offline (``<engine>-plugin install --batch
file://...``), and for the secured Elasticsearch a hard-linked copy of the plain install plus the
analysis plugin its security index needs. Everything is built beside the target and moved in
place with ``os.replace``, so an interrupted install never leaves a half node behind; ``MARKER``
is written last and says the directory is complete."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hybrid_qpr.errors import ClusterError
from hybrid_qpr.localnode import security
from hybrid_qpr.localnode.distributions import Distribution
from hybrid_qpr.localnode.maven import Artifacts, fetch

MARKER = "hybrid-qpr-node.json"  # written last by an install: the node directory is complete


def install_distribution(home: Path, mvn: str, dist: Distribution, node_dir: Path, java_home: Path,
                         say: Callable[[str], None]) -> None:
    """Fetch ``dist``'s artifacts into ``home`` and build ``node_dir`` from them."""
    home.mkdir(parents=True, exist_ok=True)
    artifacts = fetch(home, mvn, dist, java_home=java_home, say=say)
    with built_beside(node_dir) as partial:
        assemble(artifacts, partial, dist, java_home, say)


def install_secured_copy(base_dir: Path, node_dir: Path, dist: Distribution, java_home: Path,
                         say: Callable[[str], None]) -> None:
    """``node_dir`` as the plain install ``base_dir`` hard-linked file by file (no second copy
    on disk; its config/ copied, since the plain node rewrites files there in place), plus the
    analysis plugin the security index needs (``security.build_analysis_plugin``): a plugin in
    the shared install would load into the plain node too."""
    say(f"building {node_dir.name}: {base_dir.name} plus the {security.ANALYSIS_PLUGIN} plugin")
    own = {"config", "data", "logs", "secure", MARKER, f"{dist.engine}.pid"}  # top level only
    with built_beside(node_dir) as partial:
        shutil.copytree(base_dir, partial, copy_function=_link_or_copy,
                        ignore=lambda where, names: [n for n in names if Path(where) == base_dir and n in own])
        shutil.copytree(base_dir / "config", partial / "config")
        security.build_analysis_plugin(partial, java_home, dist.version)
        (partial / MARKER).write_text(json.dumps({
            "engine": dist.engine, "version": dist.version, "linked_from": str(base_dir),
            "plugins": {security.ANALYSIS_PLUGIN: "built from hybrid_qpr/localnode/java"}}, indent=2), encoding="utf-8")


@contextmanager
def built_beside(node_dir: Path) -> Iterator[Path]:
    """A fresh ``<node_dir>.partial`` to build in, moved onto ``node_dir`` (replacing one left by
    an older, unmarked install) when the block succeeds, and removed whatever happens."""
    partial = node_dir.with_name(node_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        yield partial
        if node_dir.exists():
            shutil.rmtree(node_dir)
        os.replace(partial, node_dir)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def assemble(artifacts: Artifacts, target: Path, dist: Distribution, java_home: Path,
             say: Callable[[str], None]) -> None:
    """Unpack the server into ``target``, add the modules its zip lacks and install the plugins."""
    say(f"unpacking {artifacts.distribution.name}")
    unzip_single_root(artifacts.distribution, target)
    lib_jars = {p.name for p in (target / "lib").glob("*.jar")}
    for spec in dist.modules:
        module_dir = target / "modules" / spec.name
        module_dir.mkdir(parents=True)
        for jar in artifacts.modules[spec.name]:
            if jar.name not in lib_jars:  # the server already ships its own copy
                shutil.copy2(jar, module_dir / jar.name)
        (module_dir / "plugin-descriptor.properties").write_text(
            f"description={spec.description}\nversion={dist.version}\nname={spec.name}\n"
            f"classname={spec.classname}\njava.version=11\nopensearch.version={dist.version}\n"
            f"extended.plugins={','.join(spec.extended_plugins)}\nhas.native.controller=false\n",
            encoding="utf-8",
        )
        if spec.policy:
            (module_dir / "plugin-security.policy").write_text(spec.policy, encoding="utf-8")
    prefix = dist.env_prefix
    env = dict(os.environ, **{f"{prefix}_JAVA_HOME": str(java_home), f"{prefix}_PATH_CONF": str(target / "config")})
    env.pop("JAVA_TOOL_OPTIONS", None)
    for name in dist.plugins:
        say(f"installing plugin {name}")
        result = subprocess.run(
            [str(target / "bin" / f"{dist.engine}-plugin"), "install", "--batch", artifacts.plugins[name].as_uri()],
            env=env, capture_output=True, text=True,
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise ClusterError(f"{dist.engine}-plugin could not install {name} (exit {result.returncode}):\n{tail}")
    (target / MARKER).write_text(json.dumps({
        "engine": dist.engine,
        "version": dist.version,
        "plugins": {name: artifacts.plugins[name].name for name in dist.plugins},
        "modules": {spec.name: [p.name for p in artifacts.modules[spec.name]] for spec in dist.modules},
    }, indent=2), encoding="utf-8")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or no hard links there
        shutil.copy2(source, target)


def unzip_single_root(archive: Path, target: Path) -> None:
    """Extract ``archive`` (one top-level directory) so that directory becomes ``target``,
    keeping the Unix permission bits (``zipfile`` drops them: bin/ scripts must stay executable)."""
    staging = target.with_name(target.name + ".unzip")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            path = Path(zf.extract(info, staging))
            mode = (info.external_attr >> 16) & 0o777
            if mode and not stat.S_ISLNK(info.external_attr >> 16):
                path.chmod(mode)
    roots = list(staging.iterdir())
    if len(roots) != 1 or not roots[0].is_dir():
        raise ClusterError(f"{archive}: expected one top-level directory, found {[p.name for p in roots]}")
    os.replace(roots[0], target)
    shutil.rmtree(staging, ignore_errors=True)
