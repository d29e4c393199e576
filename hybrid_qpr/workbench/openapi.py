"""The workbench API described in OpenAPI 3.1, served at ``/api/openapi.json``.

Written by hand (the app has no schema library): the tests check that every route the app
serves is described here and every described route is served."""

from __future__ import annotations

from typing import Any

from hybrid_qpr.search_request import ACCEPTED_MODES, SEARCH_OPTIONS, SearchOption
from hybrid_qpr.workbench.guard import TOKEN_HEADER
from hybrid_qpr.workbench.service import API_VERSION, COMPARE_MODES, COMPARE_OWN, Limits

_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}
# the options whose largest value is this server's limit, not the library's
_LIMITED = {"top_k": "max_k", "offset": "max_offset"}


def _param(name: str, description: str, schema: dict[str, Any], *, required: bool = False, array: bool = False):
    out = {"name": name, "in": "query", "required": required, "description": description,
           "schema": {"type": "array", "items": schema} if array else schema}
    if array:
        out.update(style="form", explode=True)
    return out


def _option(option: SearchOption, limits: Limits) -> dict[str, Any]:
    """A search option (``search_request.SEARCH_OPTIONS``) as a query parameter: its name, type,
    range, choices, default and help."""
    schema: dict[str, Any] = {"type": _TYPES[option.kind]}
    choices = ACCEPTED_MODES if option.name == "mode" else option.choices  # an old mode name is accepted too
    if choices:
        schema["enum"] = list(choices)
    if option.minimum is not None:
        schema["minimum"] = option.minimum
    maximum = getattr(limits, _LIMITED[option.name]) if option.name in _LIMITED else option.maximum
    if maximum is not None:
        schema["maximum"] = maximum
    if option.default is not None:
        schema["default"] = option.default
    return _param(option.api_name, option.described(), schema)


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = {"$ref": "#/components/schemas/Error"}
_OBJECT = {"type": "object"}


def _errors(*statuses: int) -> dict[str, Any]:
    """The error answers of a route; every route may also answer 421 (a Host it does not know)."""
    words = {400: "malformed request", 401: "missing or wrong API key", 404: "unknown document",
             403: f"a cross-origin write, a missing or wrong {TOKEN_HEADER}, or an index write this server does "
                  "not allow", 409: "conflicting write (a tune running, or the index locked by another writer)",
             413: "query or body too large", 415: "a write whose body is not declared application/json",
             421: "a Host header that names another server (DNS rebinding)",
             422: "a value out of range", 502: "the search backend failed"}
    return {str(s): _json(_ERROR, words[s]) for s in (*statuses, 421)}


_TOKEN = {"name": TOKEN_HEADER, "in": "header", "required": True, "schema": {"type": "string"},
          "description": "This run's token, from GET /api/session (every write needs it)."}


def openapi_spec(limits: Limits = Limits(), extra_lists: tuple[str, ...] = ()) -> dict[str, Any]:
    modes = [*COMPARE_MODES, *extra_lists]
    query = _param("q", f"The query text (at most {limits.max_query_chars} characters).",
                   {"type": "string", "minLength": 1, "maxLength": limits.max_query_chars, "pattern": "\\S"},
                   required=True)
    filters = _param("filter", "Exact-match metadata filter FIELD=VALUE (repeatable; the same field twice means "
                     "either value; the older FIELD:VALUE is still read).",
                     {"type": "string", "pattern": "^[^=:]*\\S[^=:]*[=:]"}, array=True)
    options = {option.name: _option(option, limits) for option in SEARCH_OPTIONS}
    compared = [param for name, param in options.items() if name not in COMPARE_OWN]
    common_errors = _errors(400, 401, 413, 422, 502)
    return {
        "openapi": "3.1.0",
        "info": {"title": "hybrid-qpr relevance workbench", "version": API_VERSION,
                 "description": "Search an index in every mode side by side, judge hits, tune the fusion on the "
                                "judgments. With --server-api-key every /api/ route but openapi.json needs the "
                                "header X-API-Key (or Authorization: Bearer KEY). Every write (POST) must be "
                                f"same-origin, declared application/json and carry the header {TOKEN_HEADER} with "
                                "the token of GET /api/session. Errors are JSON "
                                "{\"error\": message, \"status\": code}."},
        "paths": {
            "/api/health": {"get": {"summary": "Index name, backend, document count, model, tuned fusion.",
                                    "responses": {"200": _json(_OBJECT, "health"), **_errors(401, 502)}}},
            "/api/session": {"get": {"summary": f"This run's write token (send it as {TOKEN_HEADER}) and whether "
                                                "tune may write to the index (serve --allow-index-writes).",
                                     "responses": {"200": _json({"$ref": "#/components/schemas/Session"}, "session"),
                                                   **_errors(401)}}},
            "/api/search": {"get": {
                "summary": "The hits of one mode, as 'hybrid-qpr query --json' prints them, with the request as it was "
                           "resolved (the index's tuned defaults filled in).",
                "parameters": [query, *options.values(), filters],
                "responses": {"200": _json({"$ref": "#/components/schemas/SearchAnswer"}, "hits"), **common_errors}}},
            "/api/compare": {"get": {
                "summary": f"One list per mode ({', '.join(modes)}), each hit with its rank in every other list.",
                "parameters": [query, *compared, filters],
                "responses": {"200": _json({"$ref": "#/components/schemas/CompareAnswer"}, "lists"), **common_errors}}},
            "/api/judgments": {
                "get": {"summary": "Every stored judgment, grouped by query.",
                        "responses": {"200": _json(_OBJECT, "judgments"), **_errors(401)}},
                "post": {"summary": "Judge one hit; a later judgment of the same (query, id) replaces it.",
                         "parameters": [_TOKEN],
                         "requestBody": {"required": True, "content": {"application/json": {"schema": {
                             "$ref": "#/components/schemas/Judgment"}}}},
                         "responses": {"200": _json(_OBJECT, "stored"), **_errors(400, 401, 403, 404, 413, 415, 422)}}},
            "/api/tune": {"post": {
                "summary": f"Tune fusion and alpha on the judged queries (at least {limits.min_tune_queries} with a "
                           "relevant judgment) and, when serve allows index writes, store the winner as the index "
                           "default, as 'hybrid-qpr tune' does.",
                "parameters": [_TOKEN],
                "requestBody": {"required": False, "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": False, "properties": {"store": {
                        "type": "boolean", "description": "false: report only (--dry-run); true: store, refused "
                                                          "(403) without --allow-index-writes; absent: store when "
                                                          "index writes are allowed"}}}}},
                                "description": "Empty, or the object; sent as application/json either way."},
                "responses": {"200": _json(_OBJECT, "metrics before and after"),
                              **_errors(400, 401, 403, 409, 413, 415, 422, 502)}}},
            "/api/openapi.json": {"get": {"summary": "This document.",
                                          "responses": {"200": _json(_OBJECT, "OpenAPI"), **_errors()}}},
        },
        "components": {"schemas": {
            "Error": {"type": "object", "required": ["error", "status"],
                      "properties": {"error": {"type": "string"}, "status": {"type": "integer"}}},
            "Ranked": {"type": ["object", "null"], "properties": {"score": {"type": "number"}, "rank": {"type": "integer"}}},
            "Hit": {"type": "object", "required": ["id", "text", "score"], "properties": {
                "id": {"type": "string"}, "text": {"type": "string"}, "score": {"type": "number"},
                "metadata": {"type": "object"}, "bm25": {"$ref": "#/components/schemas/Ranked"},
                "knn": {"$ref": "#/components/schemas/Ranked"},
                "fused_score": {"type": "number", "description": "with business signals: the score before them"},
                "signals": {"type": "object", "additionalProperties": {"type": "number"},
                            "description": "with business signals: each one's contribution to score"}}},
            "SearchAnswer": {"type": "object", "properties": {
                "query": {"type": "string"}, "mode": {"type": "string"}, "settings": {"type": "object"},
                "request": {"$ref": "#/components/schemas/Request"},
                "hits": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
                "judgments": {"type": "object", "additionalProperties": {"type": "integer"}}}},
            "CompareAnswer": {"type": "object", "properties": {
                "query": {"type": "string"}, "modes": {"type": "array", "items": {"type": "string"}},
                "settings": {"type": "object"}, "request": {"$ref": "#/components/schemas/Request"},
                "lists": {"type": "object", "additionalProperties": {"type": "array", "items": {"allOf": [
                    {"$ref": "#/components/schemas/Hit"},
                    {"type": "object", "properties": {"rank": {"type": "integer"}, "ranks": {
                        "type": "object", "additionalProperties": {"type": ["integer", "null"]}}}}]}}},
                "judgments": {"type": "object", "additionalProperties": {"type": "integer"}}}},
            "Request": {"type": "object", "description": "The search's settings as used: every search option, "
                                                         "the index's tuned defaults filled in (the hybrid list's "
                                                         "for compare).",
                        "required": [option.name for option in SEARCH_OPTIONS],
                        "properties": {option.name: {"type": ["null", _TYPES[option.kind]]} for option in SEARCH_OPTIONS}},
            "Session": {"type": "object", "required": ["token", "header", "index_writes"], "properties": {
                "token": {"type": "string"}, "header": {"type": "string", "const": TOKEN_HEADER},
                "index_writes": {"type": "boolean"}}},
            "Judgment": {"type": "object", "required": ["query", "id", "relevance"], "additionalProperties": False,
                         "properties": {"query": {"type": "string", "minLength": 1, "maxLength": limits.max_query_chars,
                                                  "pattern": "\\S"},
                                        "id": {"type": "string", "minLength": 1, "maxLength": limits.max_id_chars,
                                               "pattern": "^[^\\u0000-\\u001f\\u007f]+$",
                                               "description": "A document id; no control characters."},
                                        "relevance": {"type": "integer", "enum": [0, 1, 2]}}},
        }},
    }
