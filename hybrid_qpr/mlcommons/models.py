"""An ml-commons model's life: registered by chunked upload (or found already registered with the
same bytes), deployed (waiting for its task, past a memory circuit breaker open for a moment),
asked for embeddings, undeployed and deleted with its chunks; which models are deployed."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from hybrid_qpr.backends.cluster.connection import RetryPolicy
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.mlcommons.calls import LOCAL_UPLOAD_SETTING, ML, allow_local_upload_setting, ml_request
from hybrid_qpr.mlcommons.packaging import ModelPackage, package_cross_encoder, package_model

logger = logging.getLogger(__name__)

CHUNK_SIZE = 10_000_000  # ml-commons accepts chunks up to 10 MB
MODEL_INDEX = ".plugins-ml-model"  # ml-commons' model and chunk documents
DJL_DOWNLOAD = "https://publish.djl.ai/pytorch/1.13.1/ (files.txt, cpu-precxx11/linux-x86_64/native/lib/*.gz, " \
               "jnilib/0.31.1/linux-x86_64/cpu-precxx11/libdjl_torch.so)"
DEPLOYED_STATES = ("DEPLOYED", "PARTIALLY_DEPLOYED", "DEPLOYING")
BREAKER_OPEN = "Memory Circuit Breaker is open"
GROUP_DELETE_RETRY = RetryPolicy(max_retries=9, initial_backoff=0.5, max_backoff=0.5)  # every 0.5 s, 10 tries


def register(client, package: ModelPackage, name: str, *, version: str = "1", description: str = "",
             chunk_size: int = CHUNK_SIZE) -> str:
    """Register ``package`` by chunked upload; return the model id (state REGISTERED)."""
    if not 0 < chunk_size <= CHUNK_SIZE:
        raise ConfigError(f"chunk_size={chunk_size}: must be between 1 and {CHUNK_SIZE} bytes")
    data = package.path.read_bytes()
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    meta = {
        "name": name, "version": version, "description": description or f"hybrid-qpr encoder {name}",
        "model_format": "ONNX", "function_name": package.function_name,
        "model_content_size_in_bytes": package.size, "model_content_hash_value": package.sha256,
        "total_chunks": len(chunks), "model_config": package.model_config,
    }
    try:
        answer = ml_request(client, "POST", f"{ML}/models/_register_meta", meta)
    except ClusterError as exc:
        if "allow_registering_model_via_local_file" in str(exc):
            raise ClusterError(f"{exc}\nFix: set {LOCAL_UPLOAD_SETTING}=true (hybrid-qpr mlcommons register "
                               "--allow-local-upload does it)") from exc
        raise
    model_id = answer["model_id"]
    for number, chunk in enumerate(chunks):
        ml_request(client, "POST", f"{ML}/models/{model_id}/upload_chunk/{number}", chunk)
    logger.info("registered %s as %s (%d chunks, %d bytes)", name, model_id, len(chunks), package.size)
    return model_id


def register_dir(client, model_dir: str | Path, name: str | None = None, *, version: str = "1",
                 allow_local_upload: bool = False) -> str:
    """Package ``model_dir`` in a temporary directory and register it; return the model id.
    ``allow_local_upload`` first turns on the cluster setting chunked uploads need."""
    import tempfile

    from hybrid_qpr.rerankers.cross_encoder import KIND as CROSS_ENCODER

    model_dir = Path(model_dir)
    with tempfile.TemporaryDirectory(prefix="hqpr-mlcommons-") as work:
        kind = _config_kind(model_dir)
        package = (package_cross_encoder if kind == CROSS_ENCODER else package_model)(model_dir, Path(work) / "model.zip")
        if allow_local_upload:
            allow_local_upload_setting(client)
        return register(client, package, name or f"hybrid-qpr-{model_dir.resolve().name}", version=version)


def _config_kind(model_dir: Path) -> str | None:
    try:
        return json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None  # package_model reports a missing or bad config


def status(client, model_id: str) -> dict[str, Any]:
    """The model document without its bulky fields (state, chunks, hash, config, ...)."""
    model = ml_request(client, "GET", f"{ML}/models/{model_id}")
    model.pop("model_content", None)
    return model


def deployed_models(client) -> list[dict[str, Any]]:
    """The models ml-commons holds deployed (or deploying): ``{"id", "name", "state",
    "created_ms"}`` each, oldest first. Their record outlives a node restart, which deploys
    them again."""
    body = {"size": 1000, "_source": ["name", "model_state", "created_time"],
            "sort": [{"created_time": {"order": "asc", "unmapped_type": "date"}}],
            "query": {"bool": {"filter": [{"terms": {"model_state": list(DEPLOYED_STATES)}}],
                               "must_not": [{"exists": {"field": "chunk_number"}}]}}}  # not the upload chunks
    hits = ml_request(client, "POST", f"{ML}/models/_search", body)["hits"]["hits"]
    return [{"id": h["_id"], "name": h["_source"].get("name", ""), "state": h["_source"].get("model_state", ""),
             "created_ms": int(h["_source"].get("created_time") or 0)} for h in hits]


def circuit_breaker_refusal(client, model_id: str, error: str) -> ClusterError:
    """The one line for a deploy that the memory circuit breaker refused: the models that hold
    the memory, and the command that frees it."""
    others = [m for m in deployed_models(client) if m["id"] != model_id]
    if not others:
        return ClusterError(f"deploying model {model_id} failed: ml-commons' memory circuit breaker is open (the "
                            f"node's JVM heap is above plugins.ml_commons.jvm_heap_memory_threshold) and no other "
                            f"model is deployed. Fix: give the node more heap, or retry in a moment ({error})")
    listed = ", ".join(f"{m['id']} ({m['name']}, {m['state'].lower()})" for m in others)
    return ClusterError(f"deploying model {model_id} failed: ml-commons' memory circuit breaker is open; deployed "
                        f"now: {listed}. Fix: undeploy the ones you do not need, e.g. 'hybrid-qpr mlcommons undeploy "
                        f"{' '.join(m['id'] for m in others)}', and deploy again")


BREAKER_PATIENCE_S = 60.0  # how long a deploy waits for a memory circuit breaker to close again


def deploy(client, model_id: str, *, timeout: float = 300.0, poll: float = 1.0,
           breaker_patience: float = BREAKER_PATIENCE_S) -> dict[str, Any]:
    """Deploy and wait for the task; return the task. A failed task raises ``ClusterError``
    with ml-commons' error and, for the DJL native-library download, what is missing. A memory
    circuit breaker open for a moment (the JVM heap above its threshold until the garbage
    collector runs) is waited out, trying again with growing pauses for up to
    ``breaker_patience`` seconds; after that the error says which models are deployed and how
    to undeploy them."""
    give_up = time.monotonic() + breaker_patience
    pause = 2.0
    while True:
        try:
            return _deploy_once(client, model_id, timeout=timeout, poll=poll)
        except ClusterError as exc:
            if BREAKER_OPEN not in str(exc) or time.monotonic() + pause > give_up:
                raise
            logger.info("deploying %s: memory circuit breaker open, trying again in %.0f s", model_id, pause)
            time.sleep(pause)
            pause *= 2


def _deploy_once(client, model_id: str, *, timeout: float, poll: float) -> dict[str, Any]:
    try:
        task_id = ml_request(client, "POST", f"{ML}/models/{model_id}/_deploy")["task_id"]
    except ClusterError as exc:
        if BREAKER_OPEN in str(exc):
            raise circuit_breaker_refusal(client, model_id, str(exc)) from exc
        raise
    deadline = time.monotonic() + timeout
    while True:
        task = ml_request(client, "GET", f"{ML}/tasks/{task_id}")
        if task.get("state") == "COMPLETED":
            return task
        if task.get("state") not in ("CREATED", "RUNNING"):
            error = task.get("error", "")
            if BREAKER_OPEN in error:
                raise circuit_breaker_refusal(client, model_id, error)
            hint = ""
            if "pytorch" in error.lower() or "publish.djl.ai" in error:
                hint = (f"\nDJL needs PyTorch native libraries, which it downloads from {DJL_DOWNLOAD}; this node "
                        "cannot reach that host. Fix: the local node prepares them from Maven Central when it starts "
                        "('hybrid-qpr node stop && hybrid-qpr node start'); for another cluster see "
                        "docs/mlcommons.md (DJL cache plus PYTORCH_VERSION=2.4.0 in the node's environment).")
            raise ClusterError(f"deploying model {model_id} failed ({task.get('state')}): {error}{hint}")
        if time.monotonic() > deadline:
            raise ClusterError(f"deploying model {model_id}: task {task_id} still {task.get('state')} "
                               f"after {timeout:.0f} s")
        time.sleep(poll)


def undeploy(client, model_id: str) -> None:
    """Unload the model from every node (its record and chunks stay; ``deploy`` loads it again)."""
    ml_request(client, "POST", f"{ML}/models/{model_id}/_undeploy")


def delete(client, model_id: str, *, with_group: bool = False) -> None:
    """Delete a model (undeployed first) and its uploaded chunks; with ``with_group`` also the
    model group ml-commons created for it at registration.

    The chunk documents (``<model_id>_<n>`` in ``.plugins-ml-model``, ~13 MB of base64 each)
    are deleted by id *before* the model: ml-commons' delete path searches that index, and a
    search whose hits are ten chunk documents is turned into one Java string that exhausted a
    1 GB heap and killed the node (OutOfMemoryError in LocalClusterIndicesClient.createParser,
    seen on 2.19.6). Deleting them first also covers nodes without the ``reindex`` module,
    where ml-commons' own delete-by-query of the chunks fails ("failed to find action
    [...DeleteByQueryAction...]")."""
    import warnings

    from opensearchpy.exceptions import OpenSearchWarning

    model = status(client, model_id)
    if model.get("model_state") in ("DEPLOYED", "PARTIALLY_DEPLOYED", "DEPLOYING"):
        undeploy(client, model_id)
    with warnings.catch_warnings():  # "this request accesses system indices": deliberate here
        warnings.simplefilter("ignore", OpenSearchWarning)
        for number in range(int(model.get("total_chunks") or 0)):
            client.delete(index=MODEL_INDEX, id=f"{model_id}_{number}", ignore=[404])
    try:
        ml_request(client, "DELETE", f"{ML}/models/{model_id}")
    except ClusterError as exc:
        if "DeleteByQueryAction" not in str(exc):  # the model document is gone; the chunks were deleted above
            raise
    group = model.get("model_group_id")
    if with_group and group:  # the group answers 409 for a moment after its model is deleted
        ml_request(client, "DELETE", f"{ML}/model_groups/{group}", retry=GROUP_DELETE_RETRY, retry_statuses=(409, 429))


def embed(client, model_id: str, texts: list[str]):
    """Embeddings computed by the cluster (``_predict/text_embedding``) as float32 [n, dim]."""
    import numpy as np

    body = {"text_docs": list(texts), "return_number": True, "target_response": ["sentence_embedding"]}
    answer = ml_request(client, "POST", f"{ML}/_predict/text_embedding/{model_id}", body)
    rows = [result["output"][0]["data"] for result in answer["inference_results"]]
    return np.asarray(rows, dtype=np.float32)


def find_model(client, name: str, sha256: str) -> str | None:
    """The id of a model already registered under ``name`` with these very bytes, else ``None``
    (so running ``setup`` again reuses the model instead of uploading a second copy)."""
    body = {"size": 1, "query": {"bool": {"must": [{"term": {"name.keyword": name}},
                                                   {"term": {"model_content_hash_value": sha256}}],
                                          "must_not": [{"exists": {"field": "chunk_number"}}]}}}
    try:
        hits = ml_request(client, "POST", f"{ML}/models/_search", body)["hits"]["hits"]
    except ClusterError as exc:
        if " 404 " in str(exc) or "index_not_found" in str(exc):  # no model registered yet on this cluster
            return None
        raise
    return hits[0]["_id"] if hits else None
