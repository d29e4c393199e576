"""Kill -9 a search node in the middle of a bulk ingest, then show the final state is exact.

Two scenarios, on OpenSearch or Elasticsearch (a node you may kill: give its pid file and the
command that starts it again):

* ``rerun`` - the node is SIGKILLed after ``--kill-after`` documents were handed to the bulk
  writer and stays down; the ingest gives up with ``ClusterError`` after its retries. The node
  is restarted and the same ingest re-run: the index must hold exactly ``--docs`` documents,
  every id once (ids are the ``_id``s, so a re-sent document replaces, never duplicates).
* ``survive`` - the node is SIGKILLed and restarted at once while the ingest keeps retrying
  (capped exponential backoff): the one ingest run must end with the exact count.

Examples (the runs quoted in docs/elasticsearch.md and docs/reliability.md; without --pid-file and
--start-cmd the local node of ``hybrid-qpr node start`` under $HYBRID_QPR_HOME is killed and restarted)::

    python benchmarks/fault_kill_ingest.py --engine opensearch --url http://127.0.0.1:9220 --docs 5000 --kill-after 2000


    python benchmarks/fault_kill_ingest.py --engine elasticsearch --url http://127.0.0.1:9231 \\
        --pid-file /var/cache/hqpr-backends/es/elasticsearch-9.5.3/es.pid \\
        --start-cmd /var/cache/hqpr-backends/es-start.sh --docs 5000 --kill-after 2000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import DEFAULT_DATA, cluster_backend, load_pairs_slice


def wait_for_node(url: str, timeout: float) -> float:
    """Seconds until the node at ``url`` answers cluster health yellow or green (a fresh
    connection per try: the benchmark's client saw the node die)."""
    import urllib.request

    start = time.monotonic()
    last = "no answer"
    while time.monotonic() - start < timeout:
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/_cluster/health?wait_for_status=yellow&timeout=5s",
                                        timeout=10) as response:
                last = json.loads(response.read().decode("utf-8")).get("status", "?")
            if last in ("yellow", "green"):
                return time.monotonic() - start
        except OSError as exc:
            last = str(exc)
        time.sleep(1.0)
    raise SystemExit(f"the node did not come back within {timeout:.0f} s (last: {last})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["opensearch", "elasticsearch"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--pid-file", default=None,
                        help="pid file of the node to SIGKILL [default: the local node of 'hybrid-qpr node start "
                             "--engine ENGINE' under $HYBRID_QPR_HOME]")
    parser.add_argument("--start-cmd", default=None,
                        help="shell command that starts the node again (daemonised) [default: start that local node]")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--kill-after", type=int, default=2000, help="documents handed to the writer before the kill")
    parser.add_argument("--scenario", choices=["rerun", "survive", "both"], default="both")
    parser.add_argument("--index", default="hqpr-fault")
    parser.add_argument("--restart-timeout", type=float, default=600.0, help="seconds a restarted node may take")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)

    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.artifacts import write_json
    from hybrid_qpr.errors import ClusterError

    docs, _ = load_pairs_slice(args.data, args.docs, 0, 13)
    encoder = Encoder.load(None)
    results = {}

    local = None
    if args.pid_file is None or args.start_cmd is None:
        from hybrid_qpr.localnode import LocalNode

        running = LocalNode(engine=args.engine)
        if not running.status().running or running.url != args.url.rstrip("/"):
            raise SystemExit(f"--url {args.url} is not the running local {args.engine} node ({running.url}): "
                             "give --pid-file and --start-cmd")
        # pinned: once the recorded node is dead, a LocalNode without version and port means the defaults
        local = LocalNode(engine=args.engine, port=running.port, version=running.version, heap=running.heap)

    def kill() -> int:
        """SIGKILL the node and wait until the process is gone (its port is then free to restart on)."""
        pid = int(Path(args.pid_file).read_text().strip()) if args.pid_file else local.status().pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        return pid

    def start() -> None:
        if args.start_cmd:
            subprocess.run(args.start_cmd, shell=True, check=True)
        else:
            local.start()

    def documents(on_kill):
        for i, doc in enumerate(docs):
            if i == args.kill_after:
                on_kill()
            yield doc

    for scenario in (["rerun", "survive"] if args.scenario == "both" else [args.scenario]):
        backend = cluster_backend(args.engine, args.url, args.index)
        backend.drop()
        row: dict = {"docs": len(docs), "kill_after": args.kill_after}
        if scenario == "rerun":
            try:
                backend.ingest(documents(lambda: row.update(killed_pid=kill())), encoder, batch_size=250,
                               show_progress=False, max_retries=3, initial_backoff=0.5, max_backoff=2.0)
                row["first_run"] = "completed (the kill came too late to interrupt it)"
            except ClusterError as exc:
                row["first_run"] = f"ClusterError: {str(exc)[:160]}..."
            started = time.monotonic()
            start()
            wait_for_node(args.url, args.restart_timeout)
            row["restart_s"] = round(time.monotonic() - started, 1)
            backend = cluster_backend(args.engine, args.url, args.index)
            row["count_after_kill"] = backend.count()
            report = backend.ingest(docs, encoder, batch_size=250, show_progress=False)
            row["second_run"] = {"indexed": report.indexed, "updated": report.updated, "failed": len(report.failed),
                                 "verified": report.verified}
        else:
            def kill_and_restart():
                row["killed_pid"] = kill()
                threading.Thread(target=start).start()

            report = backend.ingest(documents(kill_and_restart), encoder, batch_size=250, show_progress=False,
                                    max_retries=10, initial_backoff=1.0, max_backoff=15.0)
            row["one_run"] = {"indexed": report.indexed, "updated": report.updated, "failed": len(report.failed),
                              "verified": report.verified, "retried_requests": report.retried_requests,
                              "retry_wait_s": round(report.retry_wait_seconds, 1), "seconds": round(report.seconds, 1)}
        row["final_count"] = backend.count()
        found = backend.documents([d.id for d in docs])
        row["ids_found"] = len(found)
        row["texts_equal"] = all(found[d.id].text == d.text for d in docs if d.id in found)
        row["exact"] = row["final_count"] == row["ids_found"] == len(docs) and row["texts_equal"]
        print(scenario, json.dumps(row, indent=2))
        results[scenario] = row
        backend.drop()
    if args.json_out:
        from _common import command_line

        write_json(args.json_out, {"command": command_line(), "engine": args.engine, "results": results})
    return 0 if all(r["exact"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
