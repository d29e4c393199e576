"""ml-commons models of tests on a shared node: named with one prefix, removed by the test that
made them, and what an interrupted run left behind removed before the next one deploys."""

from __future__ import annotations

import time
import uuid

from hybrid_qpr import mlcommons

TEST_PREFIX = "hqpr-test-"
# A test's model lives for minutes; one deployed longer ago is a leftover of an interrupted run,
# not the model of a run going on now beside this one.
LEFTOVER_AGE_S = 1800


def fresh_test_model_name(kind: str) -> str:
    """A fresh model name for a test (``hqpr-test-<kind>-<random>``)."""
    return f"{TEST_PREFIX}{kind}-{uuid.uuid4().hex[:8]}"


def remove_leftover_test_models(client, *, older_than_s: float = LEFTOVER_AGE_S) -> list[str]:
    """Undeploy and delete the test models still deployed from runs that ended without their
    cleanup (a killed run): each holds memory that ml-commons' circuit breaker counts, and a
    local node deploys them again when it restarts. Returns their ids."""
    cutoff_ms = (time.time() - older_than_s) * 1000
    removed = []
    for model in mlcommons.deployed_models(client):
        if model["name"].startswith(TEST_PREFIX) and model["created_ms"] < cutoff_ms:
            mlcommons.delete(client, model["id"], with_group=True)
            removed.append(model["id"])
    return removed
