"""What answers at a cluster URL: the check ``connect`` makes before a client is handed out.

Every way the answer can be wrong becomes one line that names what was found and the fix:

* the other engine (``--opensearch`` pointed at an Elasticsearch node, or the reverse), told
  by Elasticsearch's ``X-Elastic-Product`` answer header and OpenSearch's ``version.distribution``;
* plain ``http://`` to a port that speaks TLS: the node closes the connection at the first
  byte, which looks like a node that is down; a TLS handshake with the port tells them apart;
* any other server (a web server, a proxy, a stub answering ``200 {}``): its answer to the
  cluster-health probe is not a cluster health.
"""

from __future__ import annotations

import socket
import ssl
from urllib.parse import urlsplit, urlunsplit

from hybrid_qpr.backends.cluster.connection import (ENGINE_NAMES, PROBE_PATH, HttpFailure, Transport, error_for,
                                                    redact)
from hybrid_qpr.errors import ClusterError

TLS_SNIFF_SECONDS = 3.0


def probe(transport: Transport, url: str) -> None:
    """Ask ``url`` for its cluster health through ``transport`` and raise a one-line
    ``ClusterError`` unless ``transport``'s engine answered it (see the module docstring)."""
    engine = transport.engine
    name, flag = ENGINE_NAMES[engine], f"--{engine}"
    what = f"connecting to {redact(url)}"
    try:
        health = transport.request("GET", PROBE_PATH)
    except HttpFailure as failure:
        found = transport.other_engine() if failure.cause == "foreign" else None
        if found:
            raise wrong_engine(what, engine, found) from failure
        parts = urlsplit(url)
        if failure.status is None and failure.cause == "" and parts.scheme == "http" \
                and speaks_tls(parts.hostname or "", parts.port or 80):
            secure = urlunsplit(("https",) + tuple(urlsplit(redact(url)))[1:])
            raise ClusterError(f"{what}: the port answers TLS, not plain HTTP: the node serves https. "
                               f"Fix: use {secure} (and --ca-certs CA.pem if its certificate is self-signed)") from failure
        raise error_for(failure, what, engine) from failure
    found = transport.other_engine()
    if found:
        raise wrong_engine(what, engine, found)
    if not isinstance(health, dict) or "cluster_name" not in health:
        shown = " ".join(str(health).split())[:80]
        raise ClusterError(f"{what}: the server is not {name}: it answered {PROBE_PATH} with {shown!r}, not a cluster "
                           f"health. Fix: point {flag} at the node's HTTP address")


def wrong_engine(what: str, engine: str, found: str) -> ClusterError:
    other = "elasticsearch" if engine == "opensearch" else "opensearch"
    return ClusterError(f"{what}: this node is {found}, not {ENGINE_NAMES[engine]}. Fix: use --{other} URL for it "
                        f"(or point --{engine} at an {ENGINE_NAMES[engine]} node)")


def speaks_tls(host: str, port: int, timeout: float = TLS_SNIFF_SECONDS) -> bool:
    """True when a TLS handshake with ``host:port`` succeeds (the certificate is not checked:
    this only asks which protocol the port speaks)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host or None):
                return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False
