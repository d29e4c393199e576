"""Fuzz the workbench API from its own OpenAPI description (``/api/openapi.json``) with
schemathesis, against a real ``hybrid-qpr serve`` process: valid and invalid values for every
parameter and body of every route, writes with the run's token. No answer may be a server
error (5xx), and every answer must be one the description lists, with its content type and
schema. Bounded: 15 generated examples per operation and mode (valid; invalid where the operation
takes input), at most 195 requests in all."""

from __future__ import annotations

import pytest

from hybrid_qpr.testing.workbench import ServeProcess, examples_local_index, session_token
from hybrid_qpr.workbench.guard import TOKEN_HEADER
from hybrid_qpr.workbench.openapi import openapi_spec

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

EXAMPLES_PER_OPERATION = 15  # per operation and mode: 8 operations valid, 5 of them invalid too = 195


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory, committed_encoder):
    tmp = tmp_path_factory.mktemp("fuzz")
    examples_local_index(tmp / "idx", committed_encoder)
    serve = ServeProcess(tmp / "serve.log", "--index", str(tmp / "idx"))
    try:
        yield serve
    finally:
        serve.stop()


OPERATIONS = [(path, method.upper()) for path, ops in openapi_spec()["paths"].items() for method in ops]
# invalid input exists only where there is input: parameters or a body
TAKES_INPUT = {(path, method.upper()) for path, ops in openapi_spec()["paths"].items() for method, op in ops.items()
               if op.get("parameters") or op.get("requestBody")}
CASES = [(path, method, mode) for path, method in OPERATIONS for mode in ("positive", "negative")
         if mode == "positive" or (path, method) in TAKES_INPUT]


@pytest.fixture(scope="module")
def workbench_schema(fuzzed_server):
    """The description the running server serves (not the one in this process)."""
    return schemathesis.openapi.from_url(f"{fuzzed_server.url}/api/openapi.json")


@pytest.mark.parametrize("path, method, mode", CASES)
def test_no_server_error_and_answers_match_the_description(workbench_schema, fuzzed_server, path, method, mode):
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                                   status_code_conformance)

    operation = workbench_schema[path][method]
    headers = {TOKEN_HEADER: session_token(fuzzed_server.url)} if method == "POST" else None
    checks = [not_a_server_error, content_type_conformance, response_schema_conformance, status_code_conformance]

    @hypothesis.given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode)))
    @hypothesis.settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    def check(case):
        response = case.call_and_validate(headers=headers, checks=checks)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    statuses: dict[int, int] = {}
    check()
    print(f"\n{method} {path} {mode}: answers {dict(sorted(statuses.items()))}")
