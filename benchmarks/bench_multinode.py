"""OpenSearch on several nodes: sharded BM25 consistency, and 1 node vs 3 nodes.

Corpus and queries as in ``bench_cluster.py`` (the first ``--docs`` unique Quora questions;
queries are the paraphrase partners of indexed questions, each with one relevant document).

``consistency`` (needs the three-node cluster, ``hybrid-qpr node start --nodes 3``): one
index of ``--shards`` primaries and one of a single shard, same documents. Per query, BM25
top 10 from the sharded index with ``query_then_fetch`` and with ``dfs_query_then_fetch``
(interleaved) and from the single shard. Printed: MRR@10 and H@1 of each, the share of the
single shard's top 10 each sharded variant returns (same order not required), how often its
scores equal the single shard's, and p50/p99 latency.

``scaling``: ingest docs/s and query p50 (bm25, knn, hybrid through ``HybridSearcher``) on a
one-node deployment (``--single-url``) and on the three-node cluster (``--url``), each index
created with the library's defaults for that cluster unless ``--shards``/``--replicas`` say
otherwise; queries interleaved between the two clusters.

Examples (the numbers in docs/opensearch.md)::

    hybrid-qpr node start --nodes 3
    nice -n 10 python benchmarks/bench_multinode.py consistency --docs 2000 --shards 3
    nice -n 10 python benchmarks/bench_multinode.py scaling --docs 20000 --single-url http://127.0.0.1:9240
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import DEFAULT_DATA, load_pairs_slice

MULTINODE_URL = "http://127.0.0.1:9210"


def rank_of(relevant: str, ids: list[str]) -> int | None:
    return ids.index(relevant) + 1 if relevant in ids else None


def quality(ranks: list[int | None]) -> dict[str, float]:
    return {"MRR@10": sum(1 / r for r in ranks if r) / len(ranks), "H@1": sum(r == 1 for r in ranks) / len(ranks)}


def consistency(args, docs, queries, encoder) -> dict:
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect
    from hybrid_qpr.evaluation.evaluator import latency_summary

    client = connect(args.url, timeout=120)
    sharded = OpenSearchBackend(client, "hqpr-bench-sharded")
    single = OpenSearchBackend(client, "hqpr-bench-oneshard")
    for backend, shards in ((sharded, args.shards), (single, 1)):
        backend.drop()
        backend.ingest(docs, encoder, batch_size=256, show_progress=False, shards=shards, replicas=0)
    variants = {
        "query_then_fetch": OpenSearchBackend(client, sharded.index, search_type="query_then_fetch"),
        "dfs_query_then_fetch": OpenSearchBackend(client, sharded.index, search_type="dfs_query_then_fetch"),
        "one shard": single,
    }
    warm, timed = queries[: args.warmup], queries[args.warmup:]
    for q, _ in warm:
        for backend in variants.values():
            backend.bm25(q, 10)
    hits: dict[str, list] = {name: [] for name in variants}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for q, _ in timed:
        for name, backend in variants.items():
            t = time.perf_counter()
            hits[name].append(backend.bm25(q, 10))
            times[name].append(time.perf_counter() - t)
    reference = hits["one shard"]
    rows = {}
    for name in variants:
        ranks = [rank_of(relevant, [h.id for h in result]) for (_, relevant), result in zip(timed, hits[name])]
        overlap = sum(len({h.id for h in a} & {h.id for h in b}) / max(1, len(b))
                      for a, b in zip(hits[name], reference)) / len(timed)
        same_scores = sum(all(abs(x.score - y.score) <= 1e-4 * max(1.0, abs(y.score)) for x, y in zip(a, b))
                          and len(a) == len(b) for a, b in zip(hits[name], reference)) / len(timed)
        lat = latency_summary(times[name])
        rows[name] = {**quality(ranks), "top10_overlap_with_one_shard": overlap,
                      "scores_equal_one_shard": same_scores, "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"]}
    print(f"\nBM25 on {len(docs)} questions, {args.shards} shards vs 1 shard, {len(timed)} queries "
          f"(+{len(warm)} warm-up), cluster {args.url}")
    print(f"{'search':<22}{'MRR@10':>8}{'H@1':>7}{'top10 = 1 shard':>17}{'scores = 1 shard':>18}{'p50 ms':>9}{'p99 ms':>9}")
    for name, row in rows.items():
        print(f"{name:<22}{row['MRR@10']:>8.4f}{row['H@1']:>7.3f}{row['top10_overlap_with_one_shard']:>17.3f}"
              f"{row['scores_equal_one_shard']:>18.3f}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}")
    if not args.keep:
        sharded.drop()
        single.drop()
    return {"docs": len(docs), "shards": args.shards, "queries": len(timed), "variants": rows}


def scaling(args, docs, queries, encoder) -> dict:
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect
    from hybrid_qpr.evaluation.evaluator import latency_summary
    from hybrid_qpr.search import HybridSearcher

    clusters = {"1 node": args.single_url, "3 nodes": args.url}
    searchers, ingest = {}, {}
    for name, url in clusters.items():
        backend = OpenSearchBackend(connect(url, timeout=120), "hqpr-bench-scaling")
        backend.drop()
        report = backend.ingest(docs, encoder, batch_size=256, show_progress=False, shards=args.shards,
                                replicas=args.replicas)
        settings = backend.request("GET", f"/{backend.index}/_settings", what="reading the settings")
        index = next(iter(settings.values()))["settings"]["index"]
        ingest[name] = {"docs_per_s": report.docs_per_second, "seconds": report.seconds,
                        "shards": int(index["number_of_shards"]), "replicas": int(index["number_of_replicas"])}
        searchers[name] = HybridSearcher(backend, encoder)
    modes = {
        "bm25": lambda s, q: s.search(q, mode="bm25", top_k=10),
        "knn": lambda s, q: s.search(q, mode="knn", top_k=10),
        "hybrid": lambda s, q: s.search(q, mode="hybrid", fusion="rrf", alpha=0.5, top_k=10, depth=args.depth),
    }
    warm, timed = queries[: args.warmup], queries[args.warmup:]
    for q, _ in warm:
        for searcher in searchers.values():
            for run in modes.values():
                run(searcher, q)
    times = {(c, m): [] for c in searchers for m in modes}
    for q, _ in timed:
        for cluster, searcher in searchers.items():
            for mode, run in modes.items():
                t = time.perf_counter()
                run(searcher, q)
                times[(cluster, mode)].append(time.perf_counter() - t)
    print(f"\n{len(docs)} questions; {len(timed)} queries (+{len(warm)} warm-up) per mode, clusters interleaved; "
          f"hybrid RRF depth {args.depth}")
    print(f"{'cluster':<10}{'shards':>7}{'replicas':>9}{'ingest docs/s':>15}" + "".join(f"{m + ' p50':>11}" for m in modes))
    out = {}
    for cluster in searchers:
        p50 = {m: latency_summary(times[(cluster, m)])["p50_ms"] for m in modes}
        row = ingest[cluster]
        print(f"{cluster:<10}{row['shards']:>7}{row['replicas']:>9}{row['docs_per_s']:>15.0f}"
              + "".join(f"{p50[m]:>11.2f}" for m in modes))
        out[cluster] = {**row, "p50_ms": p50}
        if not args.keep:
            searchers[cluster].backend.drop()
    return {"docs": len(docs), "queries": len(timed), "depth": args.depth, "clusters": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["consistency", "scaling"])
    parser.add_argument("--url", default=MULTINODE_URL, help="the three-node cluster [default: %(default)s]")
    parser.add_argument("--single-url", default=None, help="scaling: a one-node deployment to compare with")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Quora-layout pair file [default: %(default)s]")
    parser.add_argument("--docs", type=int, default=2000, help="unique questions to index [default: %(default)s]")
    parser.add_argument("--queries", type=int, default=300, help="timed queries [default: %(default)s]")
    parser.add_argument("--warmup", type=int, default=30, help="untimed queries first [default: %(default)s]")
    parser.add_argument("--shards", type=int, default=None,
                        help="primary shards [default: consistency 3, scaling the library's default]")
    parser.add_argument("--replicas", type=int, default=None, help="scaling: replicas [default: the library's default]")
    parser.add_argument("--depth", type=int, default=30, help="scaling: hybrid list depth [default: %(default)s]")
    parser.add_argument("--keep", action="store_true", help="keep the indexes afterwards")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    if args.what == "scaling" and not args.single_url:
        parser.error("scaling needs --single-url (a one-node deployment, e.g. hybrid-qpr node start)")
    if args.what == "consistency" and args.shards is None:
        args.shards = 3

    from hybrid_qpr.encoders import Encoder
    from _common import command_line
    from hybrid_qpr.artifacts import write_json

    docs, queries = load_pairs_slice(args.data, args.docs, args.queries + args.warmup, args.seed)
    encoder = Encoder.load(None)
    result = (consistency if args.what == "consistency" else scaling)(args, docs, queries, encoder)
    if args.json_out:
        write_json(args.json_out, {"command": command_line(), **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
