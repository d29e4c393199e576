"""Ingest rate under injected faults against the unthrottled rate, on OpenSearch or Elasticsearch.

The same ``--docs`` Quora questions are ingested into a fresh index three times:

* ``direct`` - straight to the node;
* ``proxy`` - through ``hybrid_qpr.testing.faultproxy`` with no faults (the proxy's own cost);
* ``faults`` - through the proxy with ``--reject-request`` of the ``_bulk`` requests answered
  429 (with ``Retry-After: --retry-after`` when given), and ``--drop-item`` / ``--applied-item-429``
  of the documents answered 429 (not applied / applied), ``--timeout-after-apply`` and
  ``--reset`` of the requests applied but answered with a timeout or a reset connection.

Each run is checked exactly (every id read back with its text, the count equal to the ids)
and prints docs/s, the retries of the report and the proxy's counts. The target:
``faults`` at >= 40% of the unthrottled rate (the faster of ``direct`` and ``proxy``).

Example (the numbers in docs/reliability.md)::

    nice -n 10 python benchmarks/bench_faults.py --engine opensearch --url http://127.0.0.1:9220 --docs 3000 --runs proxy,faults --rounds 3
    nice -n 10 python benchmarks/bench_faults.py --engine elasticsearch --url http://127.0.0.1:9221 --docs 3000 --runs proxy,faults --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from _common import DEFAULT_DATA, cluster_backend, command_line, load_pairs_slice
from hybrid_qpr.testing.faultproxy import FaultProxy, Faults


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["opensearch", "elasticsearch"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--reject-request", type=float, default=0.3)
    parser.add_argument("--retry-after", type=int, default=None)
    parser.add_argument("--drop-item", type=float, default=0.05)
    parser.add_argument("--applied-item-429", type=float, default=0.05)
    parser.add_argument("--timeout-after-apply", type=float, default=0.0)
    parser.add_argument("--reset", type=float, default=0.0)
    parser.add_argument("--bulk-timeout", type=float, default=60.0)
    parser.add_argument("--runs", default="direct,proxy,faults")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the runs in turn this many times; the ratio uses each run's median rate "
                             "(a shared machine's load drifts: interleaving hits every run alike)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--index", default="hqpr-bench-faults")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)

    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.artifacts import write_json

    docs, _ = load_pairs_slice(args.data, args.docs, 0, 13)
    encoder = Encoder.load(None)
    encoder.encode([d.text for d in docs[:256]], side="document")  # warm up the onnxruntime session
    faults = Faults(reject_request=args.reject_request, retry_after=args.retry_after, drop_item=args.drop_item,
                    applied_item_429=args.applied_item_429, timeout_after_apply=args.timeout_after_apply,
                    reset_mid_response=args.reset, hold_seconds=args.bulk_timeout + 5, seed=args.seed)
    rows: dict[str, list[dict]] = {}
    exact_all = True
    for run in [r for _ in range(args.rounds) for r in args.runs.split(",")]:
        proxy = FaultProxy(args.url, faults if run == "faults" else Faults()) if run != "direct" else None
        if proxy:
            proxy.__enter__()
        try:
            url = proxy.url if proxy else args.url
            direct = cluster_backend(args.engine, args.url, args.index)
            direct.drop()
            backend = cluster_backend(args.engine, url, args.index)
            start = time.monotonic()
            report = backend.ingest(docs, encoder, batch_size=args.batch_size, show_progress=False,
                                    bulk_timeout=args.bulk_timeout)
            seconds = time.monotonic() - start
            found = direct.documents([d.id for d in docs])
            exact = (direct.count() == len(docs) == len(found)
                     and all(found[d.id].text == d.text for d in docs))
            exact_all &= exact
            row = {"docs": len(docs), "seconds": round(seconds, 2), "docs_per_s": round(len(docs) / seconds, 1),
                   "indexed": report.indexed, "updated": report.updated, "failed": len(report.failed),
                   "verified": report.verified, "retried_requests": report.retried_requests,
                   "retried_documents": report.retried_documents,
                   "retry_wait_s": round(report.retry_wait_seconds, 1), "exact": exact}
            if proxy:
                row["injected"] = dict(proxy.counts)
            rows.setdefault(run, []).append(row)
            print(run, json.dumps(row), flush=True)
            direct.drop()
        finally:
            if proxy:
                proxy.__exit__(None, None, None)
    results: dict = {run: {"median_docs_per_s": statistics.median(r["docs_per_s"] for r in runs), "runs": runs}
                     for run, runs in rows.items()}
    unthrottled = [results[r]["median_docs_per_s"] for r in ("direct", "proxy") if r in results]
    if unthrottled and "faults" in results:  # against the faster unthrottled run: the stricter ratio
        ratio = results["faults"]["median_docs_per_s"] / max(unthrottled)
        print("median docs/s:", {run: r["median_docs_per_s"] for run, r in results.items()})
        results["ratio_faults_to_unthrottled"] = round(ratio, 3)
        print(f"faults / unthrottled = {ratio:.1%} (target >= 40%)")
    if args.json_out:
        write_json(args.json_out, {"command": command_line(), "engine": args.engine,
                                   "faults": faults.__dict__, "results": results})
    return 0 if exact_all else 1


if __name__ == "__main__":
    sys.exit(main())
