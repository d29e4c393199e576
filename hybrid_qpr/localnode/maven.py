"""Fetch the pieces of a local OpenSearch node from Maven Central with ``mvn``.

Why Maven Central: it is reachable where Docker Hub and artifacts.opensearch.org are not
(CI runners behind a package-registry-only proxy). What it offers, verified for 2.19.6:

* ``org.opensearch.distribution.integ-test-zip:opensearch:2.19.6:zip`` - the server with
  only the ``transport-netty4`` module and no bundled JDK;
* the plugin zips ``org.opensearch.plugin:{opensearch-job-scheduler, opensearch-ml-plugin,
  opensearch-knn, neural-search}:2.19.6.0:zip`` (the k-NN zip has no native faiss/nmslib
  libraries, so only the Lucene engine works);
* the module jars ``org.opensearch.plugin:lang-painless`` (with antlr4, asm and the painless
  SPI) and ``analysis-common``, from which ``hybrid_qpr.localnode.node`` assembles module
  directories with a descriptor and a security policy.

Everything lands in ``<home>/downloads`` and is reused by later runs; ``mvn`` itself also
keeps its usual ``~/.m2`` repository.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hybrid_qpr.errors import ClusterError

logger = logging.getLogger(__name__)

# Newest 2.19.x for which the distribution and all four plugins are on Maven Central
# (checked 2026-11-22: core 2.19.7 absent; k-NN, neural-search, ml 2.19.4.0 absent).
OPENSEARCH_VERSION = "2.19.6"
PLUGIN_VERSION = OPENSEARCH_VERSION + ".0"
DISTRIBUTION = ("org.opensearch.distribution.integ-test-zip", "opensearch")
# Install order matters: a plugin's extended plugins must already be present.
PLUGINS: tuple[str, ...] = ("opensearch-job-scheduler", "opensearch-ml-plugin", "opensearch-knn", "neural-search")


@dataclass(frozen=True)
class ModuleSpec:
    """A server module missing from the integ-test zip, rebuilt from its Maven jar."""

    name: str
    artifact: str  # org.opensearch.plugin:<artifact>:<version>
    classname: str
    description: str
    extended_plugins: tuple[str, ...] = ()
    transitive: bool = False  # copy the jar's runtime dependencies too (minus the server's own)
    policy: str = ""  # plugin-security.policy body, "" for none


MODULES: tuple[ModuleSpec, ...] = (
    ModuleSpec(
        name="lang-painless",
        artifact="lang-painless",
        classname="org.opensearch.painless.PainlessPlugin",
        description="Painless scripting language (needed by opensearch-knn, which extends it)",
        transitive=True,
        # Painless compiles scripts to bytecode in its own class loader.
        policy='grant {\n  permission java.lang.RuntimePermission "createClassLoader";\n'
        '  permission java.lang.RuntimePermission "getClassLoader";\n};\n',
    ),
    ModuleSpec(
        name="analysis-common",
        artifact="analysis-common",
        classname="org.opensearch.analysis.common.CommonAnalysisPlugin",
        description="Common analyzers, tokenizers and token filters",
        extended_plugins=("lang-painless",),
    ),
)


@dataclass(frozen=True)
class Artifacts:
    """Local paths of everything a node is built from."""

    distribution: Path
    plugins: dict[str, Path]  # artifact id -> zip
    modules: dict[str, list[Path]]  # module name -> jars


def default_home() -> Path:
    """``$HYBRID_QPR_HOME``, else a cache directory the node's user can read.

    As root the node runs as an unprivileged user that cannot enter ``/root``, so root's
    default is ``/var/cache/hybrid-qpr/opensearch``; other users get ``~/.cache/...``.
    """
    env = os.environ.get("HYBRID_QPR_HOME")
    if env:
        return Path(env).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/cache/hybrid-qpr/opensearch")
    return Path.home() / ".cache" / "hybrid-qpr" / "opensearch"


def check_tools() -> tuple[str, Path]:
    """(mvn path, JAVA_HOME) or a ``ClusterError`` with the install command."""
    mvn = shutil.which("mvn")
    java = shutil.which("java")
    missing = [name for name, path in (("maven", mvn), ("openjdk-17-jdk-headless", java)) if path is None]
    if missing:
        raise ClusterError(
            f"the local OpenSearch node needs {' and '.join(missing)} on PATH. "
            f"Fix: apt-get install -y {' '.join(missing)}  (or run scripts/setup)"
        )
    java_home = Path(os.environ.get("JAVA_HOME") or Path(os.path.realpath(java)).parent.parent)
    return mvn, java_home  # type: ignore[return-value]


def _pom(dependencies: list[str]) -> str:
    """A throwaway pom whose dependency list is what ``copy-dependencies`` copies."""
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>hybrid-qpr</groupId><artifactId>opensearch-node</artifactId><version>1</version>"
        "<packaging>pom</packaging><dependencies>" + "".join(dependencies) + "</dependencies></project>\n"
    )


def _dependency(group: str, artifact: str, version: str, kind: str = "jar", exclude_server: bool = False,
                classifier: str | None = None) -> str:
    # Excluding the server artifact drops its whole tree: those jars are already in lib/.
    exclusions = (
        "<exclusions><exclusion><groupId>org.opensearch</groupId><artifactId>opensearch</artifactId></exclusion></exclusions>"
        if exclude_server
        else ""
    )
    return (
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version><type>{kind}</type>"
        + (f"<classifier>{classifier}</classifier>" if classifier else "")
        + f"{exclusions}</dependency>"
    )


def _mvn_copy(mvn: str, dependencies: list[str], out_dir: Path, transitive: bool,
              say: Callable[[str], None]) -> None:
    """Run ``mvn dependency:copy-dependencies`` into a temp dir, then move it to ``out_dir``."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        (work / "pom.xml").write_text(_pom(dependencies), encoding="utf-8")
        cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={work / 'out'}", f"-DexcludeTransitive={'false' if transitive else 'true'}",
               "-DincludeScope=runtime"]
        say(f"fetching {'the server and plugin zips (~440 MB)' if out_dir.name == 'zips' else 'module ' + out_dir.name} "
            f"from Maven Central with mvn")
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise ClusterError(f"mvn could not fetch {out_dir.name} from Maven Central (exit {result.returncode}):\n{tail}")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(work / "out", out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fetch(home: Path, mvn: str, version: str = OPENSEARCH_VERSION,
          say: Callable[[str], None] = logger.info) -> Artifacts:
    """Download (or reuse) the distribution, the plugin zips and the module jars."""
    plugin_version = version + ".0"
    downloads = home / "downloads" / version
    zips = downloads / "zips"
    names = [f"{DISTRIBUTION[1]}-{version}.zip"] + [f"{p}-{plugin_version}.zip" for p in PLUGINS]
    if not all((zips / n).is_file() for n in names):
        deps = [_dependency(*DISTRIBUTION, version, "zip")]
        deps += [_dependency("org.opensearch.plugin", p, plugin_version, "zip") for p in PLUGINS]
        _mvn_copy(mvn, deps, zips, transitive=False, say=say)
    modules: dict[str, list[Path]] = {}
    for spec in MODULES:
        target = downloads / "modules" / spec.name
        if not (target / f"{spec.artifact}-{version}.jar").is_file():
            dep = _dependency("org.opensearch.plugin", spec.artifact, version, exclude_server=True)
            _mvn_copy(mvn, [dep], target, transitive=spec.transitive, say=say)
        modules[spec.name] = sorted(target.glob("*.jar"))
    return Artifacts(
        distribution=zips / names[0],
        plugins={p: zips / f"{p}-{plugin_version}.zip" for p in PLUGINS},
        modules=modules,
    )
