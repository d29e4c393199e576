"""Quality against encode speed, one point per encoder and mode, from bench_quality.py results.

python benchmarks/plot_quality.py benchmarks/results/quality-quora.json [more.json ...] --out docs/quality-speed.svg \
    [--encoders cnn distilled-tw minilm ...]

x: corpus questions/s encoded (log scale), y: test MRR@20; one marker per mode (knn, tuned
hybrid with BM25, rerank of BM25's top 30), one colour per dataset; BM25 alone is a
horizontal line per dataset. Speeds are what bench_quality.py measured (on a shared box).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MODES = {"knn": "o", "hybrid": "*", "rerank": "s"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True, help=".svg or .png")
    ap.add_argument("--encoders", nargs="+", default=None,
                    help="plot only these encoder names (labels of many close variants overlap) [default: all]")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for colour, path in zip(colours, args.results):
        data = json.loads(Path(path).read_text())
        dataset = Path(data.get("dataset", path)).name
        if "bm25" in data:
            ax.axhline(data["bm25"]["test"]["MRR@20"], color=colour, lw=0.8, ls=":", label=f"{dataset}: BM25 alone")
        for name, enc in data["encoders"].items():
            speed = enc.get("encode_questions_per_s")
            if not speed or (args.encoders and name not in args.encoders):
                continue
            for mode, marker in MODES.items():
                ax.scatter(speed, enc["test"][mode]["MRR@20"], color=colour, marker=marker, s=60 if mode == "hybrid" else 30)
            ax.annotate(name, (speed, enc["test"]["hybrid"]["MRR@20"]), textcoords="offset points", xytext=(5, 4),
                        fontsize=8, color=colour)
        ax.scatter([], [], color=colour, marker="o", label=f"{dataset} (test, full corpus)")
    for mode, marker in MODES.items():
        ax.scatter([], [], color="grey", marker=marker, label={"knn": "kNN alone", "hybrid": "tuned hybrid with BM25",
                                                               "rerank": "rerank BM25 top 30"}[mode])
    ax.set_xscale("log")
    ax.set_xlabel("encode throughput, questions/s (shared 2-core box)")
    ax.set_ylabel("test MRR@20")
    ax.set_title("Quality against encoder speed")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)


if __name__ == "__main__":
    main()
