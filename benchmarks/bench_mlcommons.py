"""Benchmark in-cluster embedding (ml-commons) against hybrid-qpr's client-side encoder.

Exports the untouched MiniLM (or takes ``--model DIR``), registers and deploys it, indexes the
sample bank ``examples/questions.jsonl`` through a ``text_embedding`` ingest pipeline, then
for every question runs (a) a ``neural`` query (the cluster embeds the text) and (b) the
client-side path (``Encoder.encode`` + the backend's ``knn``), dropping the question itself.
Reports: register / deploy seconds, ingest docs/s through the pipeline, single-question
latency p50/p95 of ``_predict`` vs local ``encode`` and of ``neural`` vs encode + ``knn``,
Hits@1 (top hit in the same paraphrase group) for both paths and the mean overlap of
their top-10 lists. The model, pipeline and index are deleted at the end.

Example (the numbers in docs/mlcommons.md; a loaded 2-core box)::

    hybrid-qpr node start
    nice -n 10 python benchmarks/bench_mlcommons.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from hybrid_qpr import resources

BANK = resources.examples_dir() / "questions.jsonl"


def _ms(samples: list[float]) -> str:
    from hybrid_qpr.evaluation.evaluator import latency_summary

    summary = latency_summary(samples)
    return f"p50 {summary['p50_ms']:.1f} ms, p95 {summary['p95_ms']:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="exported transformer directory [default: export the untouched MiniLM]")
    parser.add_argument("--opensearch", default=None, help="URL [default: the local node]")
    parser.add_argument("--bank", default=str(BANK), help="questions JSONL with 'id', 'text', 'group'")
    args = parser.parse_args()

    from opensearchpy import helpers

    from hybrid_qpr import mlcommons
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.encoders import Encoder

    docs = [doc for _, doc in iter_documents(args.bank)]
    group = {d.id: d.metadata.get("group") for d in docs}
    client = connect(args.opensearch, timeout=300)
    with tempfile.TemporaryDirectory() as work:
        model_dir = Path(args.model) if args.model else Path(work) / "minilm"
        if not args.model:
            from hybrid_qpr.export.transformer import export_transformer_dir

            export_transformer_dir(None, model_dir)
        encoder = Encoder.load(model_dir)
        name = f"hqpr-bench-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        model_id = mlcommons.register_dir(client, model_dir, name)
        t1 = time.perf_counter()
        index, pipeline = name, f"{name}-embed"
        try:
            mlcommons.deploy(client, model_id)
            t2 = time.perf_counter()
            backend = OpenSearchBackend(client, index)
            backend.ensure_index(encoder)
            mlcommons.put_ingest_pipeline(client, pipeline, model_id)
            actions = [{"_index": index, "_id": d.id, "_source": {"text": d.text, "metadata": d.metadata}} for d in docs]
            t3 = time.perf_counter()
            helpers.bulk(client, actions, pipeline=pipeline, refresh=True, chunk_size=50)
            t4 = time.perf_counter()

            predict, encode, neural, client_side = [], [], [], []
            hit_neural = hit_client = 0
            overlap = []
            for d in docs:
                s = time.perf_counter(); mlcommons.embed(client, model_id, [d.text]); predict.append(time.perf_counter() - s)
                s = time.perf_counter(); encoder.encode([d.text]); encode.append(time.perf_counter() - s)
                s = time.perf_counter()
                body = {"size": 11, "query": mlcommons.neural_query(model_id, d.text, 11), "_source": False}
                n_ids = [h["_id"] for h in client.search(index=index, body=body)["hits"]["hits"]]
                neural.append(time.perf_counter() - s)
                s = time.perf_counter()
                c_ids = [h.id for h in backend.knn(encoder.encode([d.text])[0], 11)]
                client_side.append(time.perf_counter() - s)
                n_ids = [i for i in n_ids if i != d.id][:10]
                c_ids = [i for i in c_ids if i != d.id][:10]
                hit_neural += bool(n_ids) and group[n_ids[0]] == group[d.id]
                hit_client += bool(c_ids) and group[c_ids[0]] == group[d.id]
                overlap.append(len(set(n_ids) & set(c_ids)) / max(len(c_ids), 1))
            report = {
                "questions": len(docs),
                "register_s": round(t1 - t0, 1), "deploy_s": round(t2 - t1, 1),
                "pipeline_ingest_docs_per_s": round(len(docs) / (t4 - t3), 1),
                "predict_one": _ms(predict), "local_encode_one": _ms(encode),
                "neural_query": _ms(neural), "encode_plus_knn": _ms(client_side),
                "hits_at_1_neural": round(hit_neural / len(docs), 4),
                "hits_at_1_client_side": round(hit_client / len(docs), 4),
                "top10_overlap_mean": round(statistics.mean(overlap), 4),
            }
            print(json.dumps(report, indent=2))
        finally:
            client.indices.delete(index=index, ignore_unavailable=True)
            client.ingest.delete_pipeline(id=pipeline, ignore=[404])
            mlcommons.delete(client, model_id, with_group=True)


if __name__ == "__main__":
    main()
