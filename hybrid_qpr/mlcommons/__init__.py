"""Let an OpenSearch cluster embed questions itself: an exported transformer encoder as an
ml-commons local custom model (``model_format: ONNX``, ``function_name: TEXT_EMBEDDING``), and a
cross-encoder reranker as a ``TEXT_SIMILARITY`` one.

Flow: ``package_model`` (``packaging.py``: zip of ``model.onnx`` + ``tokenizer.json``, the graph
adapted by ``graph.py``) -> ``register`` (``models.py``: ``_register_meta`` + ``upload_chunk``, the
bytes travel in the request bodies, no URL, so ``allow_registering_model_via_url`` stays off) ->
``deploy`` (waits for the task) -> a ``text_embedding`` ingest pipeline and ``neural`` queries
(``pipelines.py``); ``setup`` (``provision.py``) does all of it for one index. Every call goes
through ``calls.ml_request``, which sends through the cluster connection's retry layer.

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

from hybrid_qpr.mlcommons.calls import LOCAL_UPLOAD_SETTING, ML, allow_local_upload_setting, ml_request
from hybrid_qpr.mlcommons.graph import MAX_IR_VERSION, MAX_OPSET, TOKEN_OUTPUT, adapt_graph
from hybrid_qpr.mlcommons.models import (BREAKER_OPEN, CHUNK_SIZE, DEPLOYED_STATES, MODEL_INDEX, circuit_breaker_refusal,
                                         delete, deploy, deployed_models, embed, find_model, register, register_dir,
                                         status, undeploy)
from hybrid_qpr.mlcommons.packaging import MODEL_TYPE, ModelPackage, ml_model_config, package_cross_encoder, package_model
from hybrid_qpr.mlcommons.pipelines import (ingest_pipeline_body, neural_query, put_ingest_pipeline, put_rerank_pipeline,
                                            rerank_ext, rerank_pipeline_body, search_template_body)
from hybrid_qpr.mlcommons.provision import Setup, setup

__all__ = ["BREAKER_OPEN", "CHUNK_SIZE", "DEPLOYED_STATES", "LOCAL_UPLOAD_SETTING", "MAX_IR_VERSION", "MAX_OPSET", "ML",
           "MODEL_INDEX", "MODEL_TYPE", "TOKEN_OUTPUT", "ModelPackage", "Setup", "adapt_graph",
           "allow_local_upload_setting", "circuit_breaker_refusal", "delete", "deploy", "deployed_models", "embed",
           "find_model", "ingest_pipeline_body", "ml_model_config", "ml_request", "neural_query", "package_cross_encoder",
           "package_model", "put_ingest_pipeline", "put_rerank_pipeline", "register", "register_dir", "rerank_ext",
           "rerank_pipeline_body", "search_template_body", "setup", "status", "undeploy"]
