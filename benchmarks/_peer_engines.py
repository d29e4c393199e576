"""The engines ``bench_peers.py`` puts side by side, each fed the same document vectors and
answering the same queries: hybrid-qpr's local index and the embedded hybrid engines a user
would pick instead (LanceDB, Milvus Lite, Qdrant's local mode).

Every engine is used with its own defaults, as a user following its documentation gets
them: its own full-text analyzer and BM25, its default fusion for hybrid (reciprocal rank
fusion in all three peers, each with its own constant), no tuning. The vectors' distance is
set to the model's (cosine). A peer's package is imported when that engine is built, so this
module loads without any of them (``pip install 'hybrid-qpr[peers]'`` brings all three).

An engine answers ``search(mode, text, k)`` with document ids, best first; the query's
vector, where the mode needs one, is encoded inside the call (one text at a time, as a
user's search does), so a timed search includes the encoding in every engine alike.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from hybrid_qpr.backends.base import adopt_model_fusion_defaults
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document

# engine name -> the packages it needs (what --engines accepts; the order of the report)
PEER_PACKAGES: dict[str, tuple[str, ...]] = {
    "lancedb": ("lancedb",),
    "milvus-lite": ("pymilvus", "milvus_lite"),
    "qdrant": ("qdrant_client",),
}
ENGINES: tuple[str, ...] = ("hybrid-qpr", *PEER_PACKAGES)
DISTRIBUTIONS = {"hybrid-qpr": "hybrid-qpr", "lancedb": "lancedb", "milvus-lite": "milvus-lite", "qdrant": "qdrant-client"}
COLLECTION = "docs"


def missing_packages(engines: Sequence[str]) -> list[str]:
    """``engine: package`` for each package of ``engines`` that does not import."""
    missing = []
    for engine in engines:
        for package in PEER_PACKAGES.get(engine, ()):
            try:
                importlib.import_module(package)
            except ImportError:
                missing.append(f"{engine}: {package}")
    return missing


def version(engine: str) -> str:
    return importlib.metadata.version(DISTRIBUTIONS[engine])


class Engine:
    """One engine over one folder. ``modes``: mode name -> what it is (the report's notes)."""

    name = ""
    modes: dict[str, str] = {}

    def __init__(self, encode_query: Callable[[str], np.ndarray], distance: str):
        self.encode_query = encode_query
        self.distance = distance

    def build(self, where: Path, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
        raise NotImplementedError

    def search(self, mode: str, text: str, k: int) -> list[str]:
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the engine's files and processes (before its folder is measured or removed)."""


class PrecomputedEncoder:
    """The model, answering with vectors encoded before for the texts it was given (any other
    text is encoded by the model), so an ingest indexes the very vectors the peers get and its
    build time leaves out the encoding every engine shares."""

    def __init__(self, encoder, texts: Sequence[str], vectors: np.ndarray):
        self.encoder = encoder
        self.rows = {text: row for row, text in enumerate(texts)}
        self.vectors = vectors

    def __getattr__(self, name):  # fingerprint, dim, distance, model_dir, config...: the model's
        return getattr(self.encoder, name)

    def encode(self, texts, batch_size: int = 256, show_progress: bool = False, side: str = "query") -> np.ndarray:
        texts = [texts] if isinstance(texts, str) else list(texts)
        if all(text in self.rows for text in texts):
            return self.vectors[[self.rows[text] for text in texts]]
        return self.encoder.encode(texts, batch_size=batch_size, show_progress=show_progress, side=side)


class HybridQpr(Engine):
    """hybrid-qpr's embedded index as ``hybrid-qpr ingest`` leaves it (the model's fusion
    defaults adopted, else RRF alpha 0.5; above its flat threshold an HNSW graph whose
    efSearch the ingest calibrates for recall, which is most of its build time), and the
    fusion ``tune`` chooses, when tuned."""

    name = "hybrid-qpr"
    modes = {"bm25": "BM25", "knn": "kNN", "hybrid": "hybrid, untuned (the index's defaults after ingest)"}

    def __init__(self, encoder, texts: Sequence[str], vectors: np.ndarray):
        super().__init__(lambda text: encoder.encode(text), encoder.distance)
        self.encoder = encoder
        self.cached = PrecomputedEncoder(encoder, texts, vectors)
        self.searcher: HybridSearcher | None = None
        self.tuned: dict | None = None

    def build(self, where, ids, texts, vectors):
        index = LocalIndex.create(where, self.cached)
        index.ingest((Document(i, t) for i, t in zip(ids, texts)), self.cached, show_progress=False)
        self.defaults_note = adopt_model_fusion_defaults(index, self.cached)
        index.close()

    def open(self, where: Path) -> HybridSearcher:
        self.searcher = HybridSearcher(LocalIndex.open(where), self.encoder)
        return self.searcher

    def set_tuned(self, fusion: str, alpha: float, depth: int) -> None:
        self.tuned = {"fusion": fusion, "alpha": alpha, "depth": depth}
        self.modes = {**type(self).modes, "hybrid-tuned": f"hybrid, tuned ({fusion} alpha {alpha}, depth {depth})"}

    def search(self, mode, text, k):
        assert self.searcher is not None
        if mode == "hybrid-tuned":
            return [r.id for r in self.searcher.search(text, mode="hybrid", top_k=k, **(self.tuned or {}))]
        return [r.id for r in self.searcher.search(text, mode=mode, top_k=k)]

    def close(self):
        if self.searcher is not None:
            self.searcher.backend.close()


class LanceDb(Engine):
    """A LanceDB table (id, text, vector), its native full-text index with its defaults
    (``FTS()``: simple tokenizer, lowercase, English stemming and stop words, ASCII folding),
    no vector index (exact search, LanceDB's default without one); hybrid with its default
    reranker (RRF, k 60) and, beside it, its linear-combination reranker (the other one it ships)."""

    name = "lancedb"
    modes = {"bm25": "full-text search (FTS, defaults)", "knn": "vector search, exact (no index)",
             "hybrid": "hybrid, default reranker (RRF k=60)", "hybrid-linear": "hybrid, LinearCombinationReranker (defaults)"}

    def build(self, where, ids, texts, vectors):
        import lancedb
        import pyarrow as pa
        from lancedb.index import FTS

        self.db = lancedb.connect(str(where))
        data = pa.table({"id": pa.array(list(ids)), "text": pa.array(list(texts)),
                         "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])})
        self.table = self.db.create_table(COLLECTION, data=data)
        self.table.create_index("text", config=FTS())
        self.table.wait_for_index(["text_idx"])

    def search(self, mode, text, k):
        from lancedb.rerankers import LinearCombinationReranker

        # naming the score column keeps LanceDB from warning that it adds it unasked
        if mode == "bm25":
            query = self.table.search(text, query_type="fts").select(["id", "_score"])
        elif mode == "knn":
            query = self.table.search(self.encode_query(text)[0]).distance_type(self.distance).select(["id", "_distance"])
        else:
            query = self.table.search(query_type="hybrid").vector(self.encode_query(text)[0]).text(text) \
                .distance_type(self.distance)
            if mode == "hybrid-linear":
                query = query.rerank(LinearCombinationReranker())
            query = query.select(["id"])
        return query.limit(k).to_arrow()["id"].to_pylist()


class MilvusLite(Engine):
    """A Milvus Lite collection (the local file store of pymilvus): a VARCHAR text field with
    its default analyzer feeding the BM25 function (a sparse field, SPARSE_INVERTED_INDEX), a
    dense field (AUTOINDEX, COSINE); hybrid by ``hybrid_search`` with ``RRFRanker()`` (k 60)."""

    name = "milvus-lite"
    modes = {"bm25": "full-text search (BM25 function, default analyzer)", "knn": "dense search (AUTOINDEX, COSINE)",
             "hybrid": "hybrid_search, RRFRanker() (k=60)"}

    def build(self, where, ids, texts, vectors):
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        where.mkdir(parents=True, exist_ok=True)
        self.client = MilvusClient(str(where / "milvus.db"))
        schema = self.client.create_schema(auto_id=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=max(len(i.encode()) for i in ids))
        longest = max(len(t.encode("utf-8")) for t in texts)
        schema.add_field("text", DataType.VARCHAR, max_length=min(65535, max(longest, 1)), enable_analyzer=True)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=int(vectors.shape[1]))
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                     input_field_names=["text"], output_field_names=["sparse"]))
        params = self.client.prepare_index_params()
        params.add_index(field_name="dense", index_type="AUTOINDEX", metric_type=self.distance.upper())
        params.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self.client.create_collection(COLLECTION, schema=schema, index_params=params)
        for start in range(0, len(ids), 1000):
            rows = [{"id": ids[i], "text": texts[i], "dense": vectors[i].tolist()}
                    for i in range(start, min(start + 1000, len(ids)))]
            self.client.insert(COLLECTION, rows)
        self.client.flush(COLLECTION)
        self.client.load_collection(COLLECTION)

    def search(self, mode, text, k):
        from pymilvus import AnnSearchRequest, RRFRanker

        if mode == "bm25":
            hits = self.client.search(COLLECTION, data=[text], anns_field="sparse", limit=k, output_fields=["id"])
        elif mode == "knn":
            hits = self.client.search(COLLECTION, data=[self.encode_query(text)[0].tolist()], anns_field="dense",
                                      limit=k, output_fields=["id"])
        else:
            requests = [AnnSearchRequest(data=[self.encode_query(text)[0].tolist()], anns_field="dense", param={}, limit=k),
                        AnnSearchRequest(data=[text], anns_field="sparse", param={}, limit=k)]
            hits = self.client.hybrid_search(COLLECTION, requests, ranker=RRFRanker(), limit=k, output_fields=["id"])
        return [hit["id"] for hit in hits[0]]

    def close(self):
        self.client.close()


class Qdrant(Engine):
    """A collection of Qdrant's local mode (``QdrantClient(path=...)``, no server): the vectors
    (COSINE) and a payload text index with BM25 scoring (``scoring=True``, its default word
    tokenizer, lowercase); hybrid by two prefetches fused with ``Fusion.RRF`` (its default k).
    Local mode is Qdrant's mode for development: it searches in Python, and its BM25 counts
    every document's terms again for each query, so its latency grows with the corpus."""

    name = "qdrant"
    modes = {"bm25": "text query (payload text index, scoring=True)", "knn": "vector query (local mode: exact)",
             "hybrid": "prefetch vector + text, FusionQuery(Fusion.RRF) (default k)"}

    def build(self, where, ids, texts, vectors):
        from qdrant_client import QdrantClient, models

        self.models = models
        self.ids = list(ids)  # point ids are row numbers; the report uses the corpus ids
        self.client = QdrantClient(path=str(where))
        distance = {"cosine": models.Distance.COSINE, "dot": models.Distance.DOT}.get(self.distance, models.Distance.EUCLID)
        self.client.create_collection(COLLECTION, vectors_config=models.VectorParams(size=int(vectors.shape[1]), distance=distance))
        self.client.create_payload_index(COLLECTION, "text", models.TextIndexParams(type=models.TextIndexType.TEXT, scoring=True))
        self.client.upload_collection(COLLECTION, vectors=vectors, payload=({"text": t} for t in texts),
                                      ids=range(len(self.ids)), batch_size=1000)

    def search(self, mode, text, k):
        models = self.models
        if mode == "bm25":
            points = self.client.query_points(COLLECTION, query=models.TextQuery(text=text), using="text", limit=k,
                                              with_payload=False).points
        elif mode == "knn":
            points = self.client.query_points(COLLECTION, query=self.encode_query(text)[0].tolist(), limit=k,
                                              with_payload=False).points
        else:
            prefetch = [models.Prefetch(query=self.encode_query(text)[0].tolist(), limit=k),
                        models.Prefetch(query=models.TextQuery(text=text), using="text", limit=k)]
            points = self.client.query_points(COLLECTION, prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF),
                                              limit=k, with_payload=False).points
        return [self.ids[int(p.id)] for p in points]

    def close(self):
        self.client.close()


PEERS: dict[str, type[Engine]] = {"lancedb": LanceDb, "milvus-lite": MilvusLite, "qdrant": Qdrant}
