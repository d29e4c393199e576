"""Where each JVM of a local deployment lives: its node name, ports, directory and pid file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TRANSPORT_OFFSET = 100  # a node of a multi-node cluster listens for transport on its HTTP port + 100


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

    @property
    def startup_log(self) -> Path:
        """The launcher's output (JVM option errors land there)."""
        return self.root / "logs" / "startup.out"

    def log_file(self, cluster_name: str) -> Path:
        return self.root / "logs" / f"{cluster_name}.log"


def deployment_members(node_dir: Path, engine: str, cluster_name: str, port: int, nodes: int,
                       secure: bool) -> list[Member]:
    """The members of a deployment installed in ``node_dir``: the single node in that directory
    itself, the secured node beside it (``secure/``, a config/ of its own), or ``nodes`` nodes
    under ``cluster-<nodes>/node-<i>`` on consecutive HTTP and transport ports."""
    if secure:
        root = node_dir / "secure"
        return [Member(f"{cluster_name}-1", root, port, None, root / f"{engine}.pid", "https")]
    if nodes == 1:
        return [Member(f"{cluster_name}-1", node_dir, port, None, node_dir / f"{engine}.pid")]
    cluster_dir = node_dir / f"cluster-{nodes}"
    return [Member(f"{cluster_name}-{i}", cluster_dir / f"node-{i}", port + i - 1, port + i - 1 + TRANSPORT_OFFSET,
                   cluster_dir / f"node-{i}" / f"{engine}.pid")
            for i in range(1, nodes + 1)]


def log_tail(members: list[Member], cluster_name: str, lines: int = 40) -> str:
    """The launcher's output and the tail of each member's log (for a failed start's error)."""
    parts = []
    for member in members:
        for path, count in ((member.startup_log, 20), (member.log_file(cluster_name), lines)):
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()
                if text:
                    parts.append(f"--- last {min(count, len(text))} lines of {path} ---\n" + "\n".join(text[-count:]))
    return "\n".join(parts) or f"(no log file under {members[0].root / 'logs'})"
