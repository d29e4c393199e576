"""Let an OpenSearch cluster embed questions itself: an exported transformer encoder as an
ml-commons local custom model (``model_format: ONNX``, ``function_name: TEXT_EMBEDDING``).

Flow: ``package_model`` (zip of ``model.onnx`` + ``tokenizer.json``) -> ``register``
(``_register_meta`` + ``upload_chunk``: the bytes travel in the request bodies, no URL, so
``allow_registering_model_via_url`` stays off) -> ``deploy`` (waits for the task) -> a
``text_embedding`` ingest pipeline (``put_ingest_pipeline``) and ``neural`` queries
(``neural_query``).

Why the graph is adapted before zipping. ml-commons 2.19 runs an ONNX text-embedding model
through DJL with its own translator: it tokenizes one text, feeds ``input_ids`` and
``attention_mask`` (plus ``token_type_ids`` when ``model_type`` is ``bert``/``albert``),
takes the graph's *first* output as token embeddings [1, seq, dim] and mean-pools them over
the attention mask in Java. hybrid-qpr's transformer graphs already pool (output
``embeddings`` [batch, dim], see ``hybrid_qpr.encoders.transformer``), so ``adapt_graph``
adds a first output ``token_embeddings`` = the pooled vector repeated at every position.
The mask-weighted mean of identical vectors is that vector, so the cluster's "mean pooling"
returns exactly the embedding hybrid-qpr computes, and ``normalize_result`` (true for a
normalising model) leaves a unit vector unchanged.

Offline limits (measured on OpenSearch 2.19.6, see docs/mlcommons.md): registering works
offline; **deploying does not** unless DJL's PyTorch native libraries are already in the
node's DJL cache, because DJL's OnnxRuntime engine loads PyTorch as its "alternative engine"
for the translator's array operations, and ml-commons pins that to PyTorch 1.13.1
(``cpu-precxx11``), which DJL downloads from ``https://publish.djl.ai``. ``deploy`` turns
that failure into a ``ClusterError`` that names the download and the cache directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_qpr.encoders import MODEL_FILE, TOKENIZER_FILE, read_config
from hybrid_qpr.errors import ArtifactError, ClusterError, ConfigError
from hybrid_qpr.text.analysis import LEGACY

logger = logging.getLogger(__name__)

ML = "/_plugins/_ml"
CHUNK_SIZE = 10_000_000  # ml-commons accepts chunks up to 10 MB
TOKEN_OUTPUT = "token_embeddings"
# not "bert": that would make ml-commons feed a token_type_ids input the graph does not have
MODEL_TYPE = "minilm"
# ml-commons 2.19 bundles onnxruntime 1.16.3: "Unsupported model IR version: 10, max supported IR version: 9"
MAX_IR_VERSION = 9
MAX_OPSET = 19
MODEL_INDEX = ".plugins-ml-model"  # ml-commons' model and chunk documents
LOCAL_UPLOAD_SETTING = "plugins.ml_commons.allow_registering_model_via_local_file"
DJL_DOWNLOAD = "https://publish.djl.ai/pytorch/1.13.1/ (files.txt, cpu-precxx11/linux-x86_64/native/lib/*.gz, " \
               "jnilib/0.31.1/linux-x86_64/cpu-precxx11/libdjl_torch.so)"


@dataclass(frozen=True)
class ModelPackage:
    """A zip ready for ``register``: its path, size, sha256 and the ml-commons ``model_config``."""

    path: Path
    size: int
    sha256: str
    dim: int
    model_config: dict[str, Any]
    function_name: str = "TEXT_EMBEDDING"


def adapt_graph(model_path: str | Path, out_path: str | Path) -> None:
    """Write a copy of a hybrid-qpr transformer graph whose first output is ``token_embeddings``
    [batch, seq, dim]: the pooled ``embeddings`` broadcast over the sequence axis (see module doc)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    graph = model.graph
    names = [o.name for o in graph.output]
    if names[:1] != ["embeddings"] or {i.name for i in graph.input} != {"input_ids", "attention_mask"}:
        raise ArtifactError(f"{model_path}: expected inputs input_ids/attention_mask and first output 'embeddings' "
                            f"(a hybrid-qpr transformer export); found outputs {names}")
    axis = helper.make_tensor("hqpr_axis1", TensorProto.INT64, [1], [1])
    graph.initializer.append(axis)
    graph.node.extend([
        helper.make_node("Unsqueeze", ["embeddings", "hqpr_axis1"], ["hqpr_emb3"]),        # [b, 1, d]
        helper.make_node("Shape", ["input_ids"], ["hqpr_bs"]),                              # [b, s]
        helper.make_node("Concat", ["hqpr_bs", "hqpr_axis1"], ["hqpr_shape"], axis=0),       # [b, s, 1]
        helper.make_node("Expand", ["hqpr_emb3", "hqpr_shape"], [TOKEN_OUTPUT]),            # [b, s, d]
    ])
    dim = graph.output[0].type.tensor_type.shape.dim[-1]
    token = helper.make_tensor_value_info(TOKEN_OUTPUT, TensorProto.FLOAT, ["batch", "seq", dim.dim_value or "dim"])
    outputs = [token] + list(graph.output)
    del graph.output[:]
    graph.output.extend(outputs)
    _save_for_ml_commons(model, model_path, out_path)


def _save_for_ml_commons(model, model_path: str | Path, out_path: str | Path) -> None:
    """Save ``model`` with an IR version ml-commons' onnxruntime reads (checked opset)."""
    import onnx

    if model.ir_version > MAX_IR_VERSION:
        # IR 10 only adds things these graphs do not use (4-bit types, overloaded functions)
        model.ir_version = MAX_IR_VERSION
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset > MAX_OPSET:
        raise ArtifactError(f"{model_path}: opset {opset}; ml-commons' onnxruntime 1.16 runs opset <= {MAX_OPSET}")
    onnx.checker.check_model(model)
    onnx.save(model, str(out_path))


def ml_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """The ml-commons ``model_config`` for a hybrid-qpr transformer ``config.json``."""
    return {
        "model_type": MODEL_TYPE,
        "embedding_dimension": int(config["dim"]),
        "framework_type": "sentence_transformers",
        "pooling_mode": "mean",
        "normalize_result": bool(config.get("normalize", False)),
        "all_config": json.dumps({"hybrid_qpr": {k: config.get(k) for k in ("dim", "distance", "max_length")}}),
    }


def _write_zip(out_zip: Path, files: dict[str, Path]) -> None:
    """A zip whose bytes depend on the files' contents only (fixed timestamps), so the same model
    always has the same sha256 and ``find_model`` recognises it on a second ``setup``."""
    from hybrid_qpr.artifacts import atomic_write

    with atomic_write(out_zip, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(info, Path(path).read_bytes())


def package_model(model_dir: str | Path, out_zip: str | Path) -> ModelPackage:
    """Zip an exported transformer directory in the ml-commons custom-model layout
    (``model.onnx`` with the adapted graph, ``tokenizer.json``) atomically at ``out_zip``."""
    import tempfile

    model_dir, out_zip = Path(model_dir), Path(out_zip)
    config = read_config(model_dir)
    if config.get("kind") != "transformer":
        raise ConfigError(f"{model_dir}: kind {config.get('kind')!r}; ml-commons text embedding needs a transformer "
                          "encoder (export one with hybrid_qpr.export.transformer); the CNN uses hybrid-qpr's own "
                          "tokenizer, which ml-commons cannot run")
    for name in (MODEL_FILE, TOKENIZER_FILE):
        if not (model_dir / name).is_file():
            raise ArtifactError(f"{model_dir / name}: missing")
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_zip.parent) as work:
        adapted = Path(work) / MODEL_FILE
        adapt_graph(model_dir / MODEL_FILE, adapted)
        _write_zip(out_zip, {MODEL_FILE: adapted, TOKENIZER_FILE: model_dir / TOKENIZER_FILE})
    data = out_zip.read_bytes()
    return ModelPackage(out_zip, len(data), hashlib.sha256(data).hexdigest(), int(config["dim"]),
                        ml_model_config(config))


def package_cross_encoder(model_dir: str | Path, out_zip: str | Path) -> ModelPackage:
    """Zip a reranker directory (``hybrid-qpr reranker export``) as an ml-commons
    ``TEXT_SIMILARITY`` model: ml-commons tokenizes ``(query, document)`` as a BERT pair with
    ``tokenizer.json`` and feeds ``input_ids``, ``attention_mask`` and ``token_type_ids``, which
    is our graph's signature; its first output is the score. Only the IR version is lowered.
    ml-commons' tokenizer truncates with the tokenizer file's own rule, not hybrid-qpr's
    question-keeping one, so scores agree while a pair fits ``max_length`` (docs/reranker.md)."""
    import onnx

    from hybrid_qpr.rerankers.cross_encoder import read_reranker_config

    model_dir, out_zip = Path(model_dir), Path(out_zip)
    config = read_reranker_config(model_dir)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory(dir=out_zip.parent) as work:
        graph = Path(work) / MODEL_FILE
        _save_for_ml_commons(onnx.load(str(model_dir / MODEL_FILE)), model_dir / MODEL_FILE, graph)
        _write_zip(out_zip, {MODEL_FILE: graph, TOKENIZER_FILE: model_dir / TOKENIZER_FILE})
    data = out_zip.read_bytes()
    model_config = {"model_type": "bert", "embedding_dimension": 1, "framework_type": "huggingface_transformers",
                    "all_config": json.dumps({"hybrid_qpr": {k: config.get(k) for k in ("kind", "max_length", "query_tokens")}})}
    return ModelPackage(out_zip, len(data), hashlib.sha256(data).hexdigest(), 1, model_config, "TEXT_SIMILARITY")


def _request(client, method: str, path: str, body: Any = None, *, retries: int = 5, **params) -> dict[str, Any]:
    """One ml-commons call. 429s are retried after ``0.5 * 2^attempt`` s: ml-commons answers
    "Memory Circuit Breaker is open" while the JVM heap is above
    ``plugins.ml_commons.jvm_heap_memory_threshold`` (85 %), which on a 1 GB node happens
    for a moment after bulk work until the garbage collector runs."""
    from opensearchpy.exceptions import TransportError

    from hybrid_qpr.backends.cluster.connection import reason

    for attempt in range(retries + 1):
        try:
            return client.transport.perform_request(method, path, body=body, params=params or None)
        except TransportError as exc:
            if exc.status_code == 429 and attempt < retries:
                logger.info("%s %s: 429 (%s), retrying", method, path, exc.error)
                time.sleep(0.5 * 2 ** attempt)
                continue
            raise ClusterError(f"{method} {path} failed: {exc.status_code} {reason(exc.info) or exc.error}") from exc
    raise AssertionError("unreachable")  # pragma: no cover


def allow_local_upload_setting(client) -> None:
    """Set ``plugins.ml_commons.allow_registering_model_via_local_file: true`` (persistent).

    ml-commons 2.19 refuses chunked uploads without it ("To upload custom model from local
    file, user needs to enable allow_registering_model_via_local_file settings")."""
    _request(client, "PUT", "/_cluster/settings", {"persistent": {LOCAL_UPLOAD_SETTING: True}})


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
        answer = _request(client, "POST", f"{ML}/models/_register_meta", meta)
    except ClusterError as exc:
        if "allow_registering_model_via_local_file" in str(exc):
            raise ClusterError(f"{exc}\nFix: set {LOCAL_UPLOAD_SETTING}=true (hybrid-qpr mlcommons register "
                               "--allow-local-upload does it)") from exc
        raise
    model_id = answer["model_id"]
    for number, chunk in enumerate(chunks):
        _request(client, "POST", f"{ML}/models/{model_id}/upload_chunk/{number}", chunk)
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
    model = _request(client, "GET", f"{ML}/models/{model_id}")
    model.pop("model_content", None)
    return model


DEPLOYED_STATES = ("DEPLOYED", "PARTIALLY_DEPLOYED", "DEPLOYING")
BREAKER_OPEN = "Memory Circuit Breaker is open"


def deployed_models(client) -> list[dict[str, Any]]:
    """The models ml-commons holds deployed (or deploying): ``{"id", "name", "state",
    "created_ms"}`` each, oldest first. Their record outlives a node restart, which deploys
    them again."""
    body = {"size": 1000, "_source": ["name", "model_state", "created_time"],
            "sort": [{"created_time": {"order": "asc", "unmapped_type": "date"}}],
            "query": {"bool": {"filter": [{"terms": {"model_state": list(DEPLOYED_STATES)}}],
                               "must_not": [{"exists": {"field": "chunk_number"}}]}}}  # not the upload chunks
    hits = _request(client, "POST", f"{ML}/models/_search", body)["hits"]["hits"]
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


def deploy(client, model_id: str, *, timeout: float = 300.0, poll: float = 1.0) -> dict[str, Any]:
    """Deploy and wait for the task; return the task. A failed task raises ``ClusterError``
    with ml-commons' error and, for the DJL native-library download, what is missing; when the
    memory circuit breaker refuses it, which models are deployed and how to undeploy them."""
    try:
        task_id = _request(client, "POST", f"{ML}/models/{model_id}/_deploy")["task_id"]
    except ClusterError as exc:
        if BREAKER_OPEN in str(exc):
            raise circuit_breaker_refusal(client, model_id, str(exc)) from exc
        raise
    deadline = time.monotonic() + timeout
    while True:
        task = _request(client, "GET", f"{ML}/tasks/{task_id}")
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
    _request(client, "POST", f"{ML}/models/{model_id}/_undeploy")


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
        _request(client, "DELETE", f"{ML}/models/{model_id}")
    except ClusterError as exc:
        if "DeleteByQueryAction" not in str(exc):  # the model document is gone; the chunks were deleted above
            raise
    group = model.get("model_group_id")
    if with_group and group:
        for attempt in range(10):  # the group answers 409 for a moment after its model is deleted
            try:
                _request(client, "DELETE", f"{ML}/model_groups/{group}")
                return
            except ClusterError as exc:
                if " 409 " not in str(exc) or attempt == 9:
                    raise
                time.sleep(0.5)


def embed(client, model_id: str, texts: list[str]):
    """Embeddings computed by the cluster (``_predict/text_embedding``) as float32 [n, dim]."""
    import numpy as np

    body = {"text_docs": list(texts), "return_number": True, "target_response": ["sentence_embedding"]}
    answer = _request(client, "POST", f"{ML}/_predict/text_embedding/{model_id}", body)
    rows = [result["output"][0]["data"] for result in answer["inference_results"]]
    return np.asarray(rows, dtype=np.float32)


def ingest_pipeline_body(model_id: str, source: str = "text", target: str = "embedding") -> dict[str, Any]:
    """A pipeline whose ``text_embedding`` processor fills ``target`` from ``source``."""
    return {"description": f"hybrid-qpr: {source} -> {target} with ml-commons model {model_id}",
            "processors": [{"text_embedding": {"model_id": model_id, "field_map": {source: target}}}]}


def put_ingest_pipeline(client, name: str, model_id: str, source: str = "text", target: str = "embedding") -> None:
    _request(client, "PUT", f"/_ingest/pipeline/{name}", ingest_pipeline_body(model_id, source, target))


def neural_query(model_id: str, text: str, k: int, field: str = "embedding") -> dict[str, Any]:
    """A ``neural`` query: the cluster embeds ``text`` with ``model_id`` and runs k-NN on ``field``."""
    if k < 1:
        raise ConfigError(f"k={k}: must be >= 1")
    return {"neural": {field: {"query_text": text, "model_id": model_id, "k": k}}}


def rerank_pipeline_body(model_id: str, field: str = "text") -> dict[str, Any]:
    """A search pipeline whose ``rerank`` response processor re-scores the hits with the
    ml-commons ``TEXT_SIMILARITY`` model ``model_id`` on the document field ``field``."""
    return {"description": f"hybrid-qpr: rerank on {field} with ml-commons cross-encoder {model_id}",
            "response_processors": [{"rerank": {"ml_opensearch": {"model_id": model_id},
                                                "context": {"document_fields": [field]}}}]}


def put_rerank_pipeline(client, name: str, model_id: str, field: str = "text") -> None:
    _request(client, "PUT", f"/_search/pipeline/{name}", rerank_pipeline_body(model_id, field))


def rerank_ext(query_text: str) -> dict[str, Any]:
    """The ``ext`` a search through a rerank pipeline carries: the text the documents are scored against."""
    return {"rerank": {"query_context": {"query_text": query_text}}}


def find_model(client, name: str, sha256: str) -> str | None:
    """The id of a model already registered under ``name`` with these very bytes, else ``None``
    (so running ``setup`` again reuses the model instead of uploading a second copy)."""
    body = {"size": 1, "query": {"bool": {"must": [{"term": {"name.keyword": name}},
                                                   {"term": {"model_content_hash_value": sha256}}],
                                          "must_not": [{"exists": {"field": "chunk_number"}}]}}}
    try:
        hits = _request(client, "POST", f"{ML}/models/_search", body)["hits"]["hits"]
    except ClusterError as exc:
        if " 404 " in str(exc) or "index_not_found" in str(exc):  # no model registered yet on this cluster
            return None
        raise
    return hits[0]["_id"] if hits else None


def search_template_body(model_id: str, depth: int, size: int = 10, text: str = "text",
                         vector: str = "embedding") -> dict[str, Any]:
    """A stored mustache template of the hybrid query: BM25 ``match`` on ``text`` and a ``neural``
    query (the cluster embeds the text with ``model_id``) on ``vector``, each taking ``depth``
    candidates (HNSW candidate list as the client's kNN: ``KNN_CANDIDATES``, at least ``depth``).
    The only parameter a caller must send is ``query_text`` (``size`` is optional).
    Mustache escapes the text for JSON, so quotes in a question cannot break the query."""
    from hybrid_qpr.backends.cluster.backend import KNN_CANDIDATES

    source = ('{"size": {{size}}{{^size}}%d{{/size}}, "_source": ["%s", "metadata"], "query": {"hybrid": {"queries": ['
              '{"match": {"%s": {"query": "{{query_text}}"}}}, '
              '{"neural": {"%s": {"query_text": "{{query_text}}", "model_id": "%s", "k": %d, '
              '"method_parameters": {"ef_search": %d}}}}]}}}'
              % (size, text, text, vector, model_id, depth, max(depth, KNN_CANDIDATES)))
    return {"script": {"lang": "mustache", "source": source}}


def _deploy_past_breaker(client, model_id: str, timeout: float, attempts: int = 4) -> None:
    """``deploy``, tried again when ml-commons refused it for its memory circuit breaker (the
    JVM heap above its threshold for a moment, until the garbage collector runs)."""
    for attempt in range(attempts):
        try:
            deploy(client, model_id, timeout=timeout)
            return
        except ClusterError as exc:
            if "Memory Circuit Breaker" not in str(exc) or attempt == attempts - 1:
                raise
            logger.info("deploying %s: memory circuit breaker open, trying again", model_id)
            time.sleep(2.0 * 2 ** attempt)


@dataclass(frozen=True)
class Setup:
    """What ``setup`` made: the names a user (or ``curl``) needs."""

    model_id: str
    reused_model: bool
    index: str
    ingest_pipeline: str
    search_pipeline: str
    template: str
    fusion: dict[str, Any]


def setup(client, model_dir: str | Path, index: str, *, name: str | None = None, allow_local_upload: bool = False,
          deploy_timeout: float = 300.0) -> Setup:
    """Everything a cluster needs to embed and search by itself, in one call (idempotent):

    1. the model registered (or the one already registered with the same bytes reused) and deployed;
    2. ingest pipeline ``<index>-embed`` (``text`` -> ``embedding``), the index's default pipeline,
       so a plain ``{"text": ...}`` document is embedded by the cluster;
    3. the index in hybrid-qpr's layout for this model (created when missing; an index made by
       ``hybrid-qpr ingest`` with the same model works with it as it is);
    4. search pipeline ``<index>-hybrid`` with the index's tuned fusion (``hybrid-qpr tune``; the
       model's defaults, else the library's, when it was never tuned), the index's default search pipeline;
    5. stored search template ``<index>-hybrid``: the hybrid query that needs only ``query_text``.
    """
    import tempfile

    from hybrid_qpr.backends.base import adopt_model_fusion_defaults
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, pipeline_body
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_DEPTH, DEFAULT_FUSION, RRF_K

    model_dir = Path(model_dir)
    encoder = Encoder.load(model_dir)  # checks the directory before anything is sent
    name = name or f"hybrid-qpr-{model_dir.resolve().name}"
    with tempfile.TemporaryDirectory(prefix="hqpr-mlcommons-") as work:
        package = package_model(model_dir, Path(work) / "model.zip")
        model_id = find_model(client, name, package.sha256)
        reused = model_id is not None
        if model_id is None:
            if allow_local_upload:
                allow_local_upload_setting(client)
            model_id = register(client, package, name)
    _deploy_past_breaker(client, model_id, deploy_timeout)

    embed_pipeline, hybrid_pipeline = f"{index}-embed", f"{index}-hybrid"
    put_ingest_pipeline(client, embed_pipeline, model_id)
    backend = OpenSearchBackend(client, index)
    # the cluster fills this index from plain text (the ingest pipeline above), so a new one runs
    # BM25 on the cluster's own analysis of ``text``: the legacy analyzer's terms, no stemmer
    backend.ensure_index(encoder, analyzer=None if backend.exists() else LEGACY)
    adopt_model_fusion_defaults(backend, encoder)  # keeps the index's own tuned defaults
    tuned = dict(backend.fusion_defaults or {})
    fusion = {"fusion": tuned.get("fusion", DEFAULT_FUSION), "alpha": float(tuned.get("alpha", DEFAULT_ALPHA)),
              "rrf_k": int(tuned.get("rrf_k", RRF_K)), "depth": int(tuned.get("depth", DEFAULT_DEPTH)),
              "tuned": bool(tuned)}
    _request(client, "PUT", f"/_search/pipeline/{hybrid_pipeline}",
             pipeline_body(fusion["fusion"], fusion["alpha"], fusion["rrf_k"]))
    _request(client, "PUT", f"/{index}/_settings",
             {"index": {"default_pipeline": embed_pipeline, "search": {"default_pipeline": hybrid_pipeline}}})
    _request(client, "PUT", f"/_scripts/{hybrid_pipeline}", search_template_body(model_id, fusion["depth"]))
    return Setup(model_id, reused, index, embed_pipeline, hybrid_pipeline, hybrid_pipeline, fusion)
