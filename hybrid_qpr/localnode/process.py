"""The node processes: launching the members' daemons (as the system user ``hybridqpr`` when run
as root: neither engine runs as root), recognising their JVMs by pid file and command line, and
stopping them (SIGTERM, SIGKILL after a grace period) until their ports are free again."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from hybrid_qpr.errors import ClusterError
from hybrid_qpr.localnode.distributions import Distribution
from hybrid_qpr.localnode.layout import Member, log_tail

logger = logging.getLogger(__name__)

NODE_USER = "hybridqpr"


@dataclass
class _Launcher:
    """One member's ``<engine> -d`` launcher while it boots the node."""

    member: Member
    output: IO[str]
    process: subprocess.Popen


def launch(members: list[Member], dist: Distribution, node_dir: Path, heap: str, java_home: Path, user: str | None,
           timeout: float, extra_env: dict[str, str], cluster_name: str) -> None:
    """Start the members' launchers together (a cluster node waits for its peers to form a
    quorum, so starting them one after the other would stall) and wait for each to return."""
    prefix = dist.env_prefix
    launchers = []
    for member in members:
        node_env = {f"{prefix}_JAVA_HOME": str(java_home), f"{prefix}_JAVA_OPTS": f"-Xms{heap} -Xmx{heap}",
                    f"{prefix}_PATH_CONF": str(member.root / "config"), **extra_env}
        env = dict(os.environ, **node_env)
        env.pop("JAVA_TOOL_OPTIONS", None)
        cmd = [str(node_dir / "bin" / dist.engine), "-d", "-p", str(member.pid_file)]
        if user:
            cmd = ["runuser", "-u", user, "--", "env"] + [f"{k}={v}" for k, v in node_env.items()] + cmd
        out = open(member.startup_log, "w", encoding="utf-8")
        # with -d the launcher returns once the node has bootstrapped (or failed)
        launchers.append(_Launcher(member, out, subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                                 cwd=member.root)))
    deadline = time.monotonic() + timeout
    failures: dict[Member, int | None] = {}  # exit code, None: timed out
    for launcher in launchers:
        try:
            code = launcher.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            launcher.process.kill()
            code = None
        launcher.output.close()
        if code != 0:
            failures[launcher.member] = code
    if failures:
        what = ", ".join(f"{m.name} ({'timed out' if c is None else f'exit {c}'})" for m, c in failures.items())
        raise ClusterError(f"{dist.label} failed to start: {what}\n{log_tail(list(failures), cluster_name)}")


def stop_members(members: list[Member], dist: Distribution, timeout: float) -> bool:
    """SIGTERM to the members' live JVMs, SIGKILL to those still alive after ``timeout``; return
    once each has exited and its HTTP port is free again (so a start right after finds it free).
    False when none was running."""
    pids = [pid for pid in (live_pid(m, dist) for m in members) if pid is not None]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.5)
    for pid in pids:
        if alive(pid):
            logger.warning("%s pid %d ignored SIGTERM for %.0f s; sending SIGKILL", dist.label, pid, timeout)
            os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.2)
    while pids and time.monotonic() < deadline + 10 and any(port_in_use(m.http_port) for m in members):
        time.sleep(0.2)  # the kernel releases a dead JVM's listening socket shortly after it exits
    for member in members:
        member.pid_file.unlink(missing_ok=True)
    return bool(pids)


def live_pid(member: Member, dist: Distribution) -> int | None:
    """The pid in the member's pid file if that process is alive and is the engine's JVM."""
    try:
        pid = int(member.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid if alive(pid) else None  # no /proc: trust the pid file
    return pid if dist.main_class.encode() in cmdline else None


def alive(pid: int) -> bool:
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


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def node_user() -> str | None:
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


def chown_tree(root: Path, user: str) -> None:
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
