"""What a cluster accepts as an index name and as a document id, checked before anything is sent.

Index names follow the rules both engines enforce when an index is created (Elasticsearch's
and OpenSearch's ``MetadataCreateIndexService.validateIndexOrAliasName``): lower case; none of
``\\ / * ? " < > | , #`` ``:`` or a space; not starting with ``_``, ``-`` or ``+``; not ``.``
or ``..``; at most 255 bytes. Two rules are stricter than the engines', because a name also
travels in a URL path and as a read target: ``%`` is refused (the server percent-decodes the
path, so ``%2a`` would reach it as ``*``, every index), and so is a leading ``.`` (hidden and
system indexes, which a user's index name must never reach). Control characters are refused
too. Names are still sent percent-encoded (``index_path``), so nothing the server decodes can
turn into a pattern.

Ids: both engines refuse an ``_id`` over 512 bytes (UTF-8), item by item in a ``_bulk``;
``id_problem`` finds such an id before it is encoded or sent, so an ingest can skip and report
that line like any other bad one.
"""

from __future__ import annotations

from urllib.parse import quote

from hybrid_qpr.errors import ConfigError

MAX_INDEX_NAME_BYTES = 255
MAX_ID_BYTES = 512
FORBIDDEN_INDEX_CHARS = '\\/*?"<>|,#: %'
NAME_RULES = ("lower case; no spaces or any of \\ / * ? \" < > | , # : %; not starting with _ - + or .; "
              f"at most {MAX_INDEX_NAME_BYTES} bytes")


def index_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be an index name of either engine (None when it can)."""
    if not isinstance(name, str) or not name:
        return "the name is empty"
    if name in (".", ".."):
        return f"{name!r} is not allowed"
    bad = sorted({c for c in name if c in FORBIDDEN_INDEX_CHARS}, key=name.index)
    if bad:
        shown = ", ".join("a space" if c == " " else repr(c) for c in bad)
        why = " ('%' would be decoded by the server: '%2a' is '*', every index)" if "%" in bad else ""
        return f"it contains {shown}{why}"
    if any(not c.isprintable() for c in name):
        return "it contains a control character"
    if name != name.lower():
        return "it has upper-case letters"
    if name[0] in "_-+":
        return f"it starts with {name[0]!r}"
    if name[0] == ".":
        return "it starts with '.' (hidden and system indexes)"
    size = len(name.encode("utf-8"))
    if size > MAX_INDEX_NAME_BYTES:
        return f"it is {size} bytes long"
    return None


def check_index_name(name: object, engine_name: str) -> str:
    """``name`` if it is a valid index name, else a one-line ``ConfigError`` giving the rule broken."""
    problem = index_name_problem(name)
    if problem:
        shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:80] + "...")
        raise ConfigError(f"index name {shown}: {problem}. {engine_name} index names are {NAME_RULES}")
    return name  # type: ignore[return-value]


def index_path(name: str, *parts: str) -> str:
    """The request path ``/<name>/<parts...>`` with the name percent-encoded, so the server
    decodes it back to exactly ``name`` (never to a pattern)."""
    return "/".join(["", quote(name, safe=""), *parts])


def id_problem(doc_id: str, engine_name: str) -> str | None:
    """Why ``doc_id`` cannot be a document ``_id`` (None when it can)."""
    size = len(doc_id.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_BYTES:
        return f"id is {size:,} bytes long; {engine_name} allows at most {MAX_ID_BYTES} bytes (UTF-8): shorten it"
    return None
