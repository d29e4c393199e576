"""The secured node's material without a node: TLS chain, credentials file, users' files, layout.
(The live checks are in test_cluster_secure.py.)"""

from __future__ import annotations

import json
import os
import ssl
import stat

import pytest

from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.localnode import LocalNode
from hybrid_qpr.localnode import security


@pytest.fixture()
def credentials(tmp_path):
    return security.Credentials("opensearch", "https://127.0.0.1:9203", str(tmp_path / "ca.pem"),
                                security.ADMIN_USER, security.new_password(), security.READER_USER,
                                security.new_password())


def test_the_node_certificate_verifies_against_the_generated_ca_only(tmp_path):
    pytest.importorskip("cryptography")  # the secure extra
    from cryptography import x509

    ca = security.generate_tls(tmp_path / "config")
    certs = ca.parent
    assert stat.S_IMODE((certs / security.NODE_KEY).stat().st_mode) == 0o600
    node = x509.load_pem_x509_certificates((certs / security.NODE_CERT).read_bytes())[0]
    names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert node.subject.rfc4514_string() == "O=hybrid-qpr,CN=hybrid-qpr-node"
    # the server side loads the pair; a client trusting the CA accepts it (chain checked by OpenSSL)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs / security.NODE_CERT, certs / security.NODE_KEY)
    node.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.read_bytes()))
    # a second CA is another CA: its certificate does not vouch for this node
    other = security.generate_tls(tmp_path / "other")
    with pytest.raises(Exception):
        node.verify_directly_issued_by(x509.load_pem_x509_certificate(other.read_bytes()))


def test_credentials_file_is_private_and_repr_hides_the_secrets(tmp_path, credentials):
    path = tmp_path / "creds.json"
    credentials.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert security.Credentials.load(path) == credentials
    for secret in credentials.secrets():
        assert secret not in repr(credentials) and secret not in str(credentials)
    assert security.Credentials.load(tmp_path / "missing.json") is None


def test_users_files_hold_bcrypt_hashes_never_the_passwords(credentials):
    pytest.importorskip("bcrypt")  # the secure extra
    import bcrypt

    opensearch = security.opensearch_security_files(credentials)
    assert set(opensearch) == {"config.yml", "internal_users.yml", "roles.yml", "roles_mapping.yml"}
    users = json.loads(opensearch["internal_users.yml"])
    for user, password in ((credentials.admin_user, credentials.admin_password),
                           (credentials.reader_user, credentials.reader_password)):
        hashed = users[user]["hash"]
        assert hashed.startswith("$2y$") and bcrypt.checkpw(password.encode(), hashed.replace("$2y$", "$2b$", 1).encode())
    mapping = json.loads(opensearch["roles_mapping.yml"])
    assert mapping["all_access"]["users"] == [credentials.admin_user]
    assert mapping[security.READ_ROLE]["users"] == [credentials.reader_user]
    assert "admin" not in users  # no demo user
    elasticsearch = security.elasticsearch_security_files(credentials)
    lines = dict(line.split(":", 1) for line in elasticsearch["users"].splitlines())
    assert bcrypt.checkpw(credentials.reader_password.encode(), lines[credentials.reader_user].encode())
    assert f"{security.READ_ROLE}:{credentials.reader_user}" in elasticsearch["users_roles"]
    role = json.loads(elasticsearch["roles.yml"])[security.READ_ROLE]
    assert role["indices"][0]["privileges"] == ["read", "view_index_metadata", "monitor"]
    every = "".join(opensearch.values()) + "".join(elasticsearch.values())
    assert not any(secret in every for secret in credentials.secrets())


def test_secured_deployments_have_their_own_layout(tmp_path):
    es = LocalNode(tmp_path, engine="elasticsearch", secure=True)
    assert (es.url, es.version, es.cluster_name) == ("https://127.0.0.1:9202", "9.5.3", "hybrid-qpr-elasticsearch-secure")
    assert es.state_file.name == "elasticsearch-secure-node.json"
    # its own install (the plain one hard-linked, plus the security index's analysis plugin)
    assert es.node_dir.name == "elasticsearch-9.5.3-secure" and es.members[0].root == es.node_dir / "secure"
    assert es.credentials_file == tmp_path / "elasticsearch-secure-credentials.json" and es.credentials() is None
    opensearch = LocalNode(tmp_path, secure=True)
    assert (opensearch.url, opensearch.version, opensearch.heap) == ("https://127.0.0.1:9203", "2.19.4", "512m")
    assert opensearch.dist.plugins == ("opensearch-security",) and opensearch.dist.security
    plain = LocalNode(tmp_path)
    assert plain.url == "http://127.0.0.1:9200" and plain.credentials() is None
    with pytest.raises(ConfigError, match="no security plugin on Maven Central.*--version 2.19.4"):
        LocalNode(tmp_path, secure=True, version="3.6.0")
    with pytest.raises(ConfigError, match="runs as one node"):
        LocalNode(tmp_path, secure=True, nodes=3)


def test_the_analysis_plugin_needs_javac_and_says_so(tmp_path):
    runtime = tmp_path / "jre"
    (runtime / "bin").mkdir(parents=True)
    (runtime / "bin" / "java").touch()
    with pytest.raises(ClusterError, match="javac, which the Java at .* lacks.*Fix: install a JDK"):
        security.build_analysis_plugin(tmp_path / "es", runtime, "9.5.3")
    assert not (tmp_path / "es").exists()
