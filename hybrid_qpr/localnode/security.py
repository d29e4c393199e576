"""What a secured local node is given (``hybrid-qpr node start --secure``): its own TLS
material, generated users and their roles, and the file that tells a client how to connect.

Why generated here and never committed: a key or password in the repository would be known to
everyone. Each secured deployment draws its own CA (``cryptography``), node certificate
(SAN 127.0.0.1 and localhost) and random passwords on first start; keys are written 0600 and
only the node's directory and the credentials file hold them.

Users (the same names on both engines), stored as bcrypt hashes only:

- ``ADMIN_USER``: every privilege (Elasticsearch role ``superuser``, OpenSearch ``all_access``);
- ``READER_USER``: role ``READ_ROLE``, which may check cluster health, read mappings and
  search, and nothing else: ingest, delete and tune are refused with 403.

Elasticsearch keeps them in its file realm (``config/users``, ``users_roles``, ``roles.yml``). Its
API key (``POST /_security/api_key``, limited to ``READ_ROLE``) lives in the ``.security`` index,
whose mapping needs four analysis components of the ``analysis-common`` module (tokenizer
``uax_url_email``; filters ``pattern_capture``, ``lowercase``, ``unique``). The Maven Central
integ-test zip lacks that module and Central does not publish it for Elasticsearch (without it the
key's creation answers 400 "Unknown filter type [pattern_capture]"), so the secured node's install
carries a small plugin that provides them from the Lucene classes in the server's ``lib/``
(``java/SecurityIndexAnalysisPlugin.java``, compiled with the JDK's ``javac`` at install time).

OpenSearch internal users go to ``internal_users.yml`` and are loaded into the security index at
the first start (``plugins.security.allow_default_init_securityindex``), so the demo
configuration (admin/admin) is never installed.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import secrets
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.errors import ClusterError, require

ADMIN_USER = "hqpr_admin"
READER_USER = "hqpr_reader"
READ_ROLE = "hqpr_read_only"
CERTS_DIR = "certs"  # under the node's config/: paths in the yml are relative to config/
CA_FILE, NODE_CERT, NODE_KEY = "ca.pem", "node.pem", "node-key.pem"
NODE_DN = "CN=hybrid-qpr-node,O=hybrid-qpr"  # OpenSearch's plugins.security.nodes_dn
ADMIN_DN = "CN=hybrid-qpr-admin,O=hybrid-qpr"  # admin_dn: no certificate is ever issued for it
CERT_DAYS = 825


@dataclass(frozen=True)
class Credentials:
    """How to reach a secured local node; saved as JSON, mode 0600. ``repr`` hides the secrets."""

    engine: str
    url: str
    ca_certs: str
    admin_user: str
    admin_password: str
    reader_user: str
    reader_password: str
    api_key: str | None = None  # Elasticsearch: base64 ``id:key`` of a read-only key (the ApiKey header's value)

    def __repr__(self) -> str:
        return (f"Credentials(engine={self.engine!r}, url={self.url!r}, ca_certs={self.ca_certs!r}, "
                f"admin_user={self.admin_user!r}, reader_user={self.reader_user!r}, passwords and API key hidden)")

    __str__ = __repr__

    def save(self, path: Path) -> None:
        with atomic_write(path) as handle:
            os.fchmod(handle.fileno(), 0o600)  # atomic_write opens it up to the umask; close it before any secret
            handle.write(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> Credentials | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def secrets(self) -> list[str]:
        """Every secret value, for tests that check nothing leaks."""
        return [s for s in (self.admin_password, self.reader_password, self.api_key) if s]


def new_password() -> str:
    return secrets.token_urlsafe(18)  # 144 random bits, URL- and shell-safe


# ---------------------------------------------------------------------- TLS
def generate_tls(config_dir: Path) -> Path:
    """A fresh CA and a node certificate signed by it (server and client use, SAN 127.0.0.1 and
    localhost) under ``config_dir/certs``; returns the CA's path. The CA's key is not kept:
    nothing else is ever signed with it."""
    x509 = require("cryptography.x509", extra="secure", feature="a secured local node")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(dn: str):
        oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME}
        return x509.Name([x509.NameAttribute(oids[k], v) for k, v in (part.split("=", 1) for part in dn.split(","))])

    now = datetime.datetime.now(datetime.timezone.utc)
    valid_from, valid_to = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"CN=hybrid-qpr test CA {secrets.token_hex(4)},O=hybrid-qpr")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(valid_from).not_valid_after(valid_to)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    node_key = ec.generate_private_key(ec.SECP256R1())
    node_cert = (x509.CertificateBuilder().subject_name(name(NODE_DN)).issuer_name(ca_name)
                 .public_key(node_key.public_key()).serial_number(x509.random_serial_number())
                 .not_valid_before(valid_from).not_valid_after(valid_to)
                 .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                 .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                             x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
                 .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                       ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                 .sign(ca_key, hashes.SHA256()))
    certs = config_dir / CERTS_DIR
    certs.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    (certs / CA_FILE).write_bytes(ca_cert.public_bytes(pem))
    (certs / NODE_CERT).write_bytes(node_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    key_path = certs / NODE_KEY
    key_path.touch(mode=0o600)
    os.chmod(key_path, 0o600)
    key_path.write_bytes(node_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return certs / CA_FILE


# ---------------------------------------------------------------------- node settings
def elasticsearch_settings() -> dict[str, object]:
    """elasticsearch.yml entries: security on, TLS on HTTP (transport TLS is only demanded for
    a multi-node cluster; this node is single-node and loopback only)."""
    return {
        "xpack.security.enabled": "true",
        "xpack.security.http.ssl.enabled": "true",
        "xpack.security.http.ssl.key": f"{CERTS_DIR}/{NODE_KEY}",
        "xpack.security.http.ssl.certificate": f"{CERTS_DIR}/{NODE_CERT}",
        "xpack.security.http.ssl.certificate_authorities": [f"{CERTS_DIR}/{CA_FILE}"],
        # the file realm alone: the native one needs the .security index (see the module docstring)
        "xpack.security.authc.realms.file.file1.order": "0",
    }


def opensearch_settings() -> dict[str, object]:
    """opensearch.yml entries for the security plugin: TLS on transport (always required by the
    plugin) and HTTP with our CA, no demo certificates, the index initialised from our files."""
    pem = {"pemcert_filepath": f"{CERTS_DIR}/{NODE_CERT}", "pemkey_filepath": f"{CERTS_DIR}/{NODE_KEY}",
           "pemtrustedcas_filepath": f"{CERTS_DIR}/{CA_FILE}"}
    settings: dict[str, object] = {f"plugins.security.ssl.{layer}.{key}": value
                                   for layer in ("transport", "http") for key, value in pem.items()}
    settings.update({
        "plugins.security.ssl.http.enabled": "true",
        "plugins.security.ssl.transport.enforce_hostname_verification": "false",
        "plugins.security.nodes_dn": [NODE_DN],
        "plugins.security.authcz.admin_dn": [ADMIN_DN],
        "plugins.security.allow_default_init_securityindex": "true",
        "plugins.security.allow_unsafe_democertificates": "false",
        "plugins.security.audit.type": "noop",
        "plugins.security.restapi.roles_enabled": ["all_access"],
    })
    return settings


def bcrypt_hash(password: str, prefix: str) -> str:
    """A bcrypt hash with the prefix the engine's parser knows (``2a`` for Elasticsearch's file
    realm, ``2y`` for OpenSearch's internal users; the algorithm is the same)."""
    bcrypt = require("bcrypt", extra="secure", feature="a secured local node")
    return bcrypt.hashpw(password.encode("utf-8"), bcrypt.gensalt(rounds=10, prefix=b"2a")).decode("ascii") \
        .replace("$2a$", f"${prefix}$", 1)


def elasticsearch_security_files(credentials: Credentials) -> dict[str, str]:
    """The file realm (``config/users``, ``users_roles``) and the read-only role (``roles.yml``)."""
    return {
        "users": "".join(f"{user}:{bcrypt_hash(password, '2a')}\n" for user, password in
                         ((credentials.admin_user, credentials.admin_password),
                          (credentials.reader_user, credentials.reader_password))),
        "users_roles": f"superuser:{credentials.admin_user}\n{READ_ROLE}:{credentials.reader_user}\n",
        "roles.yml": json.dumps({READ_ROLE: READ_ROLE_ELASTICSEARCH}, indent=2) + "\n",  # JSON is valid YAML
    }


def opensearch_security_files(credentials: Credentials) -> dict[str, str]:
    """The security plugin's configuration (``config/opensearch-security/``) that replaces the demo
    one: basic auth against internal users only, our two users with bcrypt hashes, the read-only
    role and the role mappings. JSON is valid YAML, so each file is written as JSON."""

    def hashed(password: str) -> str:
        return bcrypt_hash(password, "2y")

    def meta(kind: str) -> dict:
        return {"_meta": {"type": kind, "config_version": 2}}

    files = {
        "config.yml": {**meta("config"), "config": {"dynamic": {
            "http": {"anonymous_auth_enabled": False},
            "authc": {"basic_internal_auth_domain": {
                "description": "HTTP basic auth against the internal users", "http_enabled": True,
                "transport_enabled": True, "order": 0,
                "http_authenticator": {"type": "basic", "challenge": True},
                "authentication_backend": {"type": "intern"}}}}}},
        "internal_users.yml": {**meta("internalusers"),
                               credentials.admin_user: {"hash": hashed(credentials.admin_password), "reserved": True,
                                                        "description": "hybrid-qpr admin (all_access)"},
                               credentials.reader_user: {"hash": hashed(credentials.reader_password),
                                                         "description": f"hybrid-qpr read-only ({READ_ROLE})"}},
        "roles.yml": {**meta("roles"), READ_ROLE: {
            "cluster_permissions": ["cluster_monitor", "cluster_composite_ops_ro"],
            "index_permissions": [{"index_patterns": ["*"],
                                   "allowed_actions": ["read", "indices_monitor", "indices:admin/mappings/get",
                                                       "indices:admin/get"]}]}},
        "roles_mapping.yml": {**meta("rolesmapping"),
                              "all_access": {"reserved": False, "users": [credentials.admin_user]},
                              READ_ROLE: {"reserved": False, "users": [credentials.reader_user]}},
    }
    return {name: json.dumps(body, indent=2) + "\n" for name, body in files.items()}


READ_ROLE_ELASTICSEARCH = {
    "cluster": ["monitor"],
    "indices": [{"names": ["*"], "privileges": ["read", "view_index_metadata", "monitor"]}],
}


# ---------------------------------------------------------------------- HTTPS with credentials
@dataclass(frozen=True)
class Access:
    """How the node's own probes (``health.py``) reach a secured node: our CA and the admin's basic auth."""

    ca_certs: str
    user: str
    password: str

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_certs)

    def authorization(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode("utf-8")).decode("ascii")

    def __repr__(self) -> str:
        return f"Access(ca_certs={self.ca_certs!r}, user={self.user!r}, password hidden)"


def request_json(method: str, url: str, access: Access | None, body: Any = None, timeout: float = 10.0) -> Any:
    """One JSON request; raises ``urllib.error.URLError`` / ``OSError`` on no answer and
    ``ClusterError`` (status and the engine's error reason, never the credentials) on a non-2xx."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    context = None
    if access is not None:
        request.add_header("Authorization", access.authorization())
        context = access.context()
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return json.loads(response.read().decode("utf-8") or "null")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:300]
        raise ClusterError(f"{method} {url} answered {exc.code}: {detail}") from None


def ensure_api_key(url: str, access: Access, credentials: Credentials) -> Credentials:
    """The credentials with a working read-only API key of the admin: the saved one if it still
    authenticates, else a new one (the first call also creates the ``.security`` index)."""
    if credentials.api_key and _api_key_works(url, access, credentials.api_key):
        return credentials
    created = request_json("POST", f"{url}/_security/api_key", access,
                           {"name": "hybrid-qpr-read-only", "role_descriptors": {READ_ROLE: READ_ROLE_ELASTICSEARCH}},
                           timeout=120.0)
    return replace(credentials, api_key=created["encoded"])


def _api_key_works(url: str, access: Access, api_key: str) -> bool:
    request = urllib.request.Request(f"{url}/_security/_authenticate", headers={"Authorization": f"ApiKey {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=access.context()):
            return True
    except (urllib.error.URLError, OSError):
        return False


# ---------------------------------------------------------------------- the security index's analysis
ANALYSIS_PLUGIN = "security-index-analysis"
_PLUGIN_SOURCE = "SecurityIndexAnalysisPlugin.java"
_PLUGIN_CLASS = "org.hybridqpr.securityanalysis.SecurityIndexAnalysisPlugin"


def build_analysis_plugin(install_dir: Path, java_home: Path, version: str) -> Path:
    """Compile ``java/SecurityIndexAnalysisPlugin.java`` against ``install_dir/lib`` and lay it out
    as ``install_dir/plugins/security-index-analysis`` (jar + descriptor); returns that directory."""
    javac = java_home / "bin" / "javac"
    if not javac.is_file():
        raise ClusterError(f"the secured Elasticsearch node compiles a small analysis plugin with javac, which the "
                           f"Java at {java_home} lacks (a runtime, not a JDK). Fix: install a JDK (apt-get install "
                           f"openjdk-17-jdk-headless, or a JDK 21+ for Elasticsearch 9) or set JAVA_HOME to one")
    source = resources.files("hybrid_qpr.localnode") / "java" / _PLUGIN_SOURCE
    target = install_dir / "plugins" / ANALYSIS_PLUGIN
    with tempfile.TemporaryDirectory(prefix="hqpr-plugin-") as work:
        classes = Path(work) / "classes"
        (Path(work) / _PLUGIN_SOURCE).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
        result = subprocess.run([str(javac), "--release", "17", "-nowarn", "-cp", str(install_dir / "lib" / "*"),
                                 "-d", str(classes), str(Path(work) / _PLUGIN_SOURCE)], capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterError(f"javac could not build the {ANALYSIS_PLUGIN} plugin for Elasticsearch {version} "
                               f"(exit {result.returncode}):\n{(result.stdout + result.stderr).strip()[-1500:]}")
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target / f"{ANALYSIS_PLUGIN}.jar", "w", zipfile.ZIP_DEFLATED) as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
    (target / "plugin-descriptor.properties").write_text(
        f"description=uax_url_email, pattern_capture, lowercase and unique for the security index (hybrid-qpr)\n"
        f"version={version}\nname={ANALYSIS_PLUGIN}\nclassname={_PLUGIN_CLASS}\njava.version=17\n"
        f"elasticsearch.version={version}\n", encoding="utf-8")
    return target
