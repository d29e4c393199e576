"""``setup``: everything an OpenSearch cluster needs to embed and search one index by itself, in
one idempotent call (model, pipelines, index, search template)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_qpr.mlcommons.calls import allow_local_upload_setting, ml_request
from hybrid_qpr.mlcommons.models import deploy, find_model, register
from hybrid_qpr.mlcommons.packaging import package_model
from hybrid_qpr.mlcommons.pipelines import put_ingest_pipeline, search_template_body
from hybrid_qpr.text.analysis import LEGACY


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
    deploy(client, model_id, timeout=deploy_timeout)

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
    ml_request(client, "PUT", f"/_search/pipeline/{hybrid_pipeline}",
             pipeline_body(fusion["fusion"], fusion["alpha"], fusion["rrf_k"]))
    ml_request(client, "PUT", f"/{index}/_settings",
             {"index": {"default_pipeline": embed_pipeline, "search": {"default_pipeline": hybrid_pipeline}}})
    ml_request(client, "PUT", f"/_scripts/{hybrid_pipeline}", search_template_body(model_id, fusion["depth"]))
    return Setup(model_id, reused, index, embed_pipeline, hybrid_pipeline, hybrid_pipeline, fusion)
