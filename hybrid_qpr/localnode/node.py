"""A single-node OpenSearch on 127.0.0.1, assembled from Maven Central and run as a daemon.

Life cycle (``hybrid-qpr cluster start|stop|status`` are thin wrappers):

1. ``install()`` - fetch the artifacts (``hybrid_qpr.localnode.maven``), unzip the server,
   rebuild the ``lang-painless`` and ``analysis-common`` modules from their jars plus a
   descriptor and policy, install the four plugins offline with ``opensearch-plugin install
   --batch file://...``. Built beside the target and moved in place with ``os.replace``,
   so an interrupted install never leaves a half node behind. Done once per version.
2. ``start()`` - OpenSearch refuses to run as root, so as root the node runs as the system
   user ``hybridqpr`` (created if missing). Single-node discovery, loopback only, 1 GB heap.
   Waits for green health; on failure the error carries the log's tail. Idempotent: a node
   already running (pid file + live process + health answers) is left alone.
3. ``stop()`` - SIGTERM to the pid in the pid file (checked to be an OpenSearch JVM), SIGKILL
   after a grace period.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_qpr.localnode.maven import (MODULES, OPENSEARCH_VERSION, PLUGINS, Artifacts, check_tools,
                                          default_home, fetch)
from hybrid_qpr.localnode.djl import prepare_pytorch
from hybrid_qpr.errors import ClusterError, ConfigError

logger = logging.getLogger(__name__)

NODE_USER = "hybridqpr"
CLUSTER_NAME = "hybrid-qpr"
DEFAULT_PORT = 9200
DEFAULT_HEAP = "1g"
MARKER = "hybrid-qpr-node.json"  # written last by install(): the node directory is complete
JVM_MAIN_CLASS = "org.opensearch.bootstrap.OpenSearch"


@dataclass
class NodeStatus:
    running: bool
    url: str
    pid: int | None = None
    health: str | None = None  # green / yellow / red, None when HTTP does not answer
    version: str | None = None
    plugins: list[str] = field(default_factory=list)
    node_dir: str = ""


class LocalNode:
    """The local node under ``home`` (default ``hybrid_qpr.localnode.maven.default_home()``)."""

    def __init__(self, home: str | Path | None = None, port: int = DEFAULT_PORT, heap: str = DEFAULT_HEAP,
                 version: str = OPENSEARCH_VERSION, say: Callable[[str], None] | None = None):
        # ``say`` reports the slow steps (fetch, install, boot); the CLI prints them on stderr
        self.say = say or logger.info
        if not re.fullmatch(r"[1-9][0-9]*[mMgG]", heap):
            raise ConfigError(f"heap={heap!r}: use a JVM size such as 512m or 1g")
        self.home = Path(home) if home is not None else default_home()
        self.version = version
        self.heap = heap
        self.node_dir = self.home / f"opensearch-{version}"
        self.pid_file = self.node_dir / "opensearch.pid"
        self.state_file = self.home / "node.json"  # port of the running node, for status --url
        self.port = port if port != DEFAULT_PORT else self._saved_port(port)

    # ------------------------------------------------------------------ public API
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.node_dir / "logs" / f"{CLUSTER_NAME}.log"

    def installed(self) -> bool:
        return (self.node_dir / MARKER).is_file()

    def install(self) -> bool:
        """Build the node directory if it is missing; True when something was built."""
        if self.installed():
            return False
        mvn, java_home = check_tools()
        self.home.mkdir(parents=True, exist_ok=True)
        artifacts = fetch(self.home, mvn, self.version, say=self.say)
        partial = self.node_dir.with_name(self.node_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            self._assemble(artifacts, partial, java_home)
            if self.node_dir.exists():  # left by an older, unmarked install
                shutil.rmtree(self.node_dir)
            os.replace(partial, self.node_dir)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return True

    def status(self, with_plugins: bool = False) -> NodeStatus:
        pid = self._live_pid()
        health, version, plugins = None, None, []
        if pid is not None:
            info = _get_json(self.url + "/")
            if info is not None:
                version = info.get("version", {}).get("number")
                health_body = _get_json(self.url + "/_cluster/health")
                health = health_body.get("status") if health_body else None
                if with_plugins:
                    rows = _get_json(self.url + "/_cat/plugins?format=json") or []
                    plugins = sorted({row["component"] for row in rows})
        return NodeStatus(running=pid is not None and health is not None, url=self.url, pid=pid, health=health,
                          version=version, plugins=plugins, node_dir=str(self.node_dir))

    def start(self, timeout: float = 240.0) -> dict[str, float | bool]:
        """Install if needed and start; returns timings ``{"install_s", "start_s", "already_running"}``."""
        t0 = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        with self._lock():
            current = self.status()
            if current.running:
                return {"install_s": 0.0, "start_s": 0.0, "already_running": True}
            if current.pid is not None:
                raise ClusterError(
                    f"an OpenSearch process (pid {current.pid}) from {self.node_dir} is alive but {self.url} does not "
                    f"answer; wait for it or run 'hybrid-qpr cluster stop'. Log: {self.log_file}"
                )
            self.pid_file.unlink(missing_ok=True)
            if _port_in_use(self.port):
                raise ClusterError(
                    f"port {self.port} on 127.0.0.1 is already taken by another process; stop it or choose another "
                    f"port with 'hybrid-qpr cluster start --port N'"
                )
            self.install()
            t_installed = time.monotonic()
            mvn, java_home = check_tools()
            user = _node_user()
            # ml-commons local models: PyTorch libraries for DJL from Maven Central (hybrid_qpr.localnode.djl)
            ml_env = prepare_pytorch(self.node_dir, self.home, mvn, say=self.say)
            self._write_config()
            if user:
                _chown_tree(self.node_dir, user)
            self._launch(java_home, user, timeout, extra_env=ml_env)
            self._wait_green(t_installed + timeout)
            self.state_file.write_text(json.dumps({"port": self.port, "version": self.version}), encoding="utf-8")
        return {"install_s": t_installed - t0, "start_s": time.monotonic() - t_installed, "already_running": False}

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the node started from this home; False when none was running."""
        pid = self._live_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.5)
        if _alive(pid):
            logger.warning("OpenSearch pid %d ignored SIGTERM for %.0f s; sending SIGKILL", pid, timeout)
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.2)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 40) -> str:
        """The launcher's output (JVM option errors land there) and the tail of the node's log."""
        parts = []
        for path, count in ((self.node_dir / "logs" / "startup.out", 20), (self.log_file, lines)):
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()
                if text:
                    parts.append(f"--- last {min(count, len(text))} lines of {path} ---\n" + "\n".join(text[-count:]))
        return "\n".join(parts) or f"(no log file under {self.node_dir / 'logs'})"

    # ------------------------------------------------------------------ install
    def _assemble(self, artifacts: Artifacts, target: Path, java_home: Path) -> None:
        self.say(f"unpacking {artifacts.distribution.name}")
        _unzip_single_root(artifacts.distribution, target)
        lib_jars = {p.name for p in (target / "lib").glob("*.jar")}
        for spec in MODULES:
            module_dir = target / "modules" / spec.name
            module_dir.mkdir(parents=True)
            for jar in artifacts.modules[spec.name]:
                if jar.name not in lib_jars:  # the server already ships its own copy
                    shutil.copy2(jar, module_dir / jar.name)
            (module_dir / "plugin-descriptor.properties").write_text(
                f"description={spec.description}\nversion={self.version}\nname={spec.name}\n"
                f"classname={spec.classname}\njava.version=11\nopensearch.version={self.version}\n"
                f"extended.plugins={','.join(spec.extended_plugins)}\nhas.native.controller=false\n",
                encoding="utf-8",
            )
            if spec.policy:
                (module_dir / "plugin-security.policy").write_text(spec.policy, encoding="utf-8")
        env = dict(os.environ, OPENSEARCH_JAVA_HOME=str(java_home), OPENSEARCH_PATH_CONF=str(target / "config"))
        for name in PLUGINS:
            self.say(f"installing plugin {name}")
            result = subprocess.run(
                [str(target / "bin" / "opensearch-plugin"), "install", "--batch", artifacts.plugins[name].as_uri()],
                env=env, capture_output=True, text=True,
            )
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
                raise ClusterError(f"opensearch-plugin could not install {name} (exit {result.returncode}):\n{tail}")
        (target / MARKER).write_text(json.dumps({
            "version": self.version,
            "plugins": {name: artifacts.plugins[name].name for name in PLUGINS},
            "modules": {spec.name: [p.name for p in artifacts.modules[spec.name]] for spec in MODULES},
        }, indent=2), encoding="utf-8")

    # ------------------------------------------------------------------ start
    def _write_config(self) -> None:
        (self.node_dir / "data").mkdir(exist_ok=True)
        (self.node_dir / "logs").mkdir(exist_ok=True)
        config = {
            "cluster.name": CLUSTER_NAME,
            "node.name": f"{CLUSTER_NAME}-1",
            "path.data": str(self.node_dir / "data"),
            "path.logs": str(self.node_dir / "logs"),
            "network.host": "127.0.0.1",
            "http.port": str(self.port),
            "discovery.type": "single-node",
            # a shared CI disk may be fuller than the default watermarks allow
            "cluster.routing.allocation.disk.threshold_enabled": "false",
            # one node cannot hold replicas: indexes created without a replica count stay green
            "cluster.default_number_of_replicas": "0",
            # ml-commons would otherwise refuse to run models on a data node
            "plugins.ml_commons.only_run_on_ml_node": "false",
            # register local ONNX models by chunked upload (hybrid-qpr mlcommons register)
            "plugins.ml_commons.allow_registering_model_via_local_file": "true",
        }
        text = "# written by hybrid-qpr cluster start; rewritten on every start\n"
        text += "".join(f"{key}: {json.dumps(value)}\n" for key, value in config.items())
        (self.node_dir / "config" / "opensearch.yml").write_text(text, encoding="utf-8")

    def _launch(self, java_home: Path, user: str | None, timeout: float,
                extra_env: dict[str, str] | None = None) -> None:
        env = dict(os.environ, OPENSEARCH_JAVA_HOME=str(java_home),
                   OPENSEARCH_JAVA_OPTS=f"-Xms{self.heap} -Xmx{self.heap}",
                   OPENSEARCH_PATH_CONF=str(self.node_dir / "config"), **(extra_env or {}))
        env.pop("JAVA_TOOL_OPTIONS", None)
        cmd = [str(self.node_dir / "bin" / "opensearch"), "-d", "-p", str(self.pid_file)]
        if user:
            keep = ["OPENSEARCH_JAVA_HOME", "OPENSEARCH_JAVA_OPTS", "OPENSEARCH_PATH_CONF", *(extra_env or {})]
            cmd = ["runuser", "-u", user, "--", "env"] + [f"{k}={env[k]}" for k in keep] + cmd
        out_path = self.node_dir / "logs" / "startup.out"
        self.say(f"starting OpenSearch {self.version} on {self.url} and waiting for green health")
        with open(out_path, "w", encoding="utf-8") as out:
            try:
                # with -d the launcher returns once the node has bootstrapped (or failed)
                result = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                        cwd=self.node_dir)
            except subprocess.TimeoutExpired as exc:
                raise ClusterError(f"OpenSearch did not start within {timeout:.0f} s\n{self.log_tail()}") from exc
        if result.returncode != 0:
            raise ClusterError(f"OpenSearch failed to start (exit {result.returncode})\n{self.log_tail()}")

    def _wait_green(self, deadline: float, settle: float = 10.0) -> None:
        """Wait for green. Yellow that stays yellow with nothing initialising for ``settle``
        seconds is accepted with a warning: an index created with replicas can never be green
        on one node, and that must not make every later start fail."""
        last, yellow_since, started = "no answer", None, time.monotonic()
        while time.monotonic() < deadline:
            # the -d launcher may return before the JVM has written its pid file
            if self._live_pid() is None and (self.pid_file.exists() or time.monotonic() > started + 60):
                raise ClusterError(f"OpenSearch exited during start-up\n{self.log_tail()}")
            body = _get_json(self.url + "/_cluster/health?wait_for_status=green&timeout=5s")
            if body is not None:
                last = body.get("status", "?")
                if last == "green":
                    return
                busy = body.get("initializing_shards", 0) or body.get("delayed_unassigned_shards", 0)
                if last == "yellow" and not busy:
                    yellow_since = yellow_since or time.monotonic()
                    if time.monotonic() - yellow_since >= settle:
                        logger.warning("health is yellow: %s replica shard(s) cannot be placed on a single node",
                                       body.get("unassigned_shards"))
                        return
                else:
                    yellow_since = None
            time.sleep(1.0)
        raise ClusterError(f"{self.url} did not reach green health in time (last status: {last})\n{self.log_tail()}")

    # ------------------------------------------------------------------ helpers
    def _live_pid(self) -> int | None:
        """The pid in the pid file if that process is alive and is an OpenSearch JVM."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return pid if _alive(pid) else None  # no /proc: trust the pid file
        return pid if JVM_MAIN_CLASS.encode() in cmdline else None

    def _saved_port(self, default: int) -> int:
        try:
            return int(json.loads(self.state_file.read_text(encoding="utf-8"))["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return default

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise concurrent ``start`` calls (parallel CI jobs, several shells)."""
        with open(self.home / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _get_json(url: str, timeout: float = 10.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _node_user() -> str | None:
    """None when not root (run as ourselves); else the system user, created if missing."""
    if os.geteuid() != 0:
        return None
    if subprocess.run(["id", "-u", NODE_USER], capture_output=True).returncode != 0:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise ClusterError(f"OpenSearch refuses to run as root and 'useradd' is missing to create user {NODE_USER!r}")
        result = subprocess.run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NODE_USER],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterError(f"could not create user {NODE_USER!r}: {result.stderr.strip()}")
        logger.info("created system user %s to run OpenSearch (it refuses to run as root)", NODE_USER)
    if shutil.which("runuser") is None:
        raise ClusterError("running the node as a non-root user needs 'runuser' (package util-linux)")
    return NODE_USER


def _chown_tree(root: Path, user: str) -> None:
    # the node writes data, logs and the pid file; it must also be able to reach root
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            shutil.chown(path, user, user)
    probe = subprocess.run(["runuser", "-u", user, "--", "test", "-w", str(root)], capture_output=True)
    if probe.returncode != 0:
        raise ClusterError(
            f"user {user!r} cannot reach {root}: a parent directory is not searchable by others. "
            f"Set HYBRID_QPR_HOME to a directory outside /root (default for root: /var/cache/hybrid-qpr/opensearch)"
        )


def _unzip_single_root(archive: Path, target: Path) -> None:
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
