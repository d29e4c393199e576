"""Choose a model's default fusion on several development domains at once, so that the untuned
hybrid (what ``query`` gives before anyone runs ``tune``) holds on each of them.

For every ``--domain NAME:TASK:BEIR_DIR[@SPLIT]`` (TASK: paraphrase, answer-selection, answer-retrieval
or community-qa) it builds an embedded index of the BEIR folder's corpus with ``--model`` (a
seeded subset of ``--docs`` where the corpus is larger: every document the sampled queries
judge or are, then others, never one judged in another split), fetches the BM25 and kNN lists
of up to ``--queries`` judged queries of ``--split`` once (``evaluator.query_lists``, with the
task's per-query filter), and scores every point of ``tune``'s grid on them
(``evaluator.tune_candidates``: the same page composition a query runs). Each point's margin on a
domain is its main metric minus that of the domain's better single mode (BM25 or kNN); the
default chosen is, of the points with no negative margin, the one with the largest mean margin
(when none holds on every domain: the largest smallest margin). Prints a table of the chosen
point, the package's untuned RRF 0.5 and each domain's own best; ``--out`` keeps every point as
JSON (``--again JSON`` chooses from it again without indexing), and ``--write`` stores the choice
as the model directory's ``fusion_defaults`` (config.json), which ``ingest`` gives every new
index built with the model::

    D=../shared/data; A=$D/answers
    hybrid-qpr dataset build $D/quora-pairs.tsv.gz --out data/quora --seed 13
    hybrid-qpr dataset build $D/wikianswers-pairs.tsv.gz --out data/wikianswers --seed 13
    hybrid-qpr dataset from-answers $A/wikiqa-dev.tsv --split-name val --out data/wikiqa-dev
    hybrid-qpr dataset from-answers $A/trecqa-dev.tsv --split-name val --out data/trecqa-dev
    hybrid-qpr dataset from-squad $A/squad-dev-part-a.json --out data/squad
    python benchmarks/choose_fusion_default.py --model fast \\
        --domain quora:paraphrase:data/quora/beir --domain wikianswers:paraphrase:data/wikianswers/beir \\
        --domain semeval-dev:community-qa:$D/semeval2016-b \\
        --domain semeval-train:community-qa:$D/semeval2016-b@train --domain wikiqa:answer-selection:data/wikiqa-dev/beir \\
        --domain trecqa:answer-selection:data/trecqa-dev/beir --domain squad:answer-retrieval:data/squad/beir \\
        --domain support:paraphrase:examples/support/beir --out benchmarks/results/fusion-default-fast.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import command_line, repo_relative, select_subset, withheld_ids

from hybrid_qpr.artifacts import ENCODER_FUSION_DEFAULTS, update_encoder_config, write_json
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.errors import HybridQPRError
from hybrid_qpr.evaluation.evaluator import query_lists, tune_candidates, tuning_depth
from hybrid_qpr.evaluation.tasks import TASKS, get_task, task_query_filters
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION
from hybrid_qpr.resources import resolve_model
from hybrid_qpr.search import HybridSearcher


def parse_domain(text: str) -> tuple[str, str, Path, str | None]:
    """``NAME:TASK:BEIR_DIR[@SPLIT]`` (SPLIT: that domain's judged split instead of ``--split``)."""
    name, task, folder = (text.split(":", 2) + ["", ""])[:3]
    folder, _, split = folder.partition("@")
    if not name or task not in TASKS or not folder:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:TASK:BEIR_DIR[@SPLIT] with TASK one of "
                                         f"{', '.join(TASKS)}")
    return name, task, Path(folder), split or None


def domain_grid(name: str, task: str, beir: Path, encoder, *, split: str, n_queries: int, n_docs: int, seed: int,
                alphas: list[float], work: Path) -> dict:
    """Every grid point's metrics on one domain, with its two single modes'."""
    corpus, queries, qrels = load_beir(beir, split)
    spec = get_task(task)
    if spec.unanswerable:  # the task counts a question without a relevant document as 0: keep them
        judged = sorted(q for q in queries if q in qrels)
        random.Random(seed).shuffle(judged)
        chosen = sorted(judged[:n_queries])
    else:
        corpus, chosen, _ = select_subset(corpus, queries, qrels, n_queries=n_queries, n_tune=0, n_docs=n_docs,
                                          withheld=withheld_ids(beir, {split}), seed=seed)
    sample = {q: queries[q] for q in chosen}
    where = work / name
    shutil.rmtree(where, ignore_errors=True)
    start = time.perf_counter()
    index = LocalIndex.create(where, encoder)
    # the corpus file's records as 'ingest' reads them (metadata such as group kept), the subset only
    documents = (doc for _, doc in iter_documents(beir / "corpus.jsonl", id_column="_id") if doc.id in corpus)
    index.ingest(documents, encoder, show_progress=False)
    built = time.perf_counter() - start
    try:
        searcher = HybridSearcher(index, encoder)
        depth = tuning_depth(None, spec.retrieve)
        lists = query_lists(searcher, sample, depth, task_query_filters(beir, task, None, list(sample)))
        found = tune_candidates(lists, qrels, alphas=alphas, depth=depth, task=task, prior=None)
    finally:
        index.close()
    print(f"{name}: {len(corpus):,} documents indexed in {built:.0f} s, {len(sample)} {split} queries; "
          f"{found.metric} bm25 {found.bm25_mrr:.4f}, knn {found.knn_mrr:.4f}, best {found.fusion} alpha "
          f"{found.alpha:.1f} {found.mrr:.4f}", flush=True)
    return {"task": task, "beir": repo_relative(beir), "split": split, "documents": len(corpus), "queries": len(sample),
            "metric": found.metric, "bm25": found.bm25_mrr, "knn": found.knn_mrr, "depth": depth,
            "best": {"fusion": found.fusion, "alpha": found.alpha, "value": found.mrr},
            "grid": [{k: g[k] for k in ("fusion", "alpha", found.metric)} for g in found.grid if "bounds" not in g]}


def choose(domains: dict[str, dict]) -> tuple[dict, list[dict]]:
    """The default, and every grid point with its margins over each domain's better single mode:
    of the points with no negative margin, the one with the largest mean margin; when no point
    holds on every domain, the one with the largest smallest margin (then the larger mean). Ties
    go to the first in grid order. The mean, not the smallest margin, ranks the points that hold:
    the smallest margin is set by the domain with the fewest queries, where it is mostly noise."""
    first = next(iter(domains.values()))
    points = []
    for i, point in enumerate(first["grid"]):
        key = (point["fusion"], point["alpha"])
        margins = {}
        for name, d in domains.items():
            value = next(g[d["metric"]] for g in d["grid"] if (g["fusion"], g["alpha"]) == key)
            margins[name] = value - max(d["bm25"], d["knn"])
        points.append({"fusion": key[0], "alpha": key[1], "order": i, "margins": margins,
                       "smallest": min(margins.values()), "mean": float(np.mean(list(margins.values())))})
    holding = [p for p in points if p["smallest"] >= -1e-12]
    if holding:
        best = max(holding, key=lambda p: (round(p["mean"], 10), -p["order"]))
    else:
        best = max(points, key=lambda p: (round(p["smallest"], 10), round(p["mean"], 10), -p["order"]))
    return best, points


def table(domains: dict[str, dict], best: dict, points: list[dict]) -> str:
    untuned = next(p for p in points if (p["fusion"], p["alpha"]) == (DEFAULT_FUSION, DEFAULT_ALPHA))
    head = "| domain | metric | BM25 | kNN | untuned rrf 0.5 | **chosen {} {:g}** | tuned on the domain itself |".format(
        best["fusion"], best["alpha"])
    lines = [head, "|---|---|---:|---:|---:|---:|---:|"]
    for name, d in domains.items():
        top = d["best"]  # as tune chooses: no other metric of the task below the better half
        better = max(d["bm25"], d["knn"])
        lines.append(f"| {name} | {d['metric']} | {d['bm25']:.4f} | {d['knn']:.4f} | {better + untuned['margins'][name]:.4f} "
                     f"| **{better + best['margins'][name]:.4f}** | {top['value']:.4f} ({top['fusion']} "
                     f"{top['alpha']:g}) |")
    for what in ("smallest", "mean"):
        lines.append(f"| {what} margin over the better half | | | | {untuned[what]:+.4f} | **{best[what]:+.4f}** | |")
    return "\n".join(lines)


def measure(args, encoder, alphas: list[float]) -> dict[str, dict]:
    """Each ``--domain``'s grid (``domain_grid``), its index in ``--work`` or a temporary folder."""
    work = args.work or Path(tempfile.mkdtemp(prefix="fusion-default-"))
    try:
        return {name: domain_grid(name, task, beir, encoder, split=split or args.split, n_queries=args.queries,
                                  n_docs=args.docs, seed=args.seed, alphas=alphas, work=work)
                for name, task, beir, split in args.domains}
    except HybridQPRError as exc:
        sys.exit(f"choose_fusion_default: {exc}")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", dest="domains", action="append", type=parse_domain, default=[],
                        metavar="NAME:TASK:BEIR_DIR[@SPLIT]", help="a development domain (repeatable)")
    parser.add_argument("--model", default=None, help="encoder directory or bundled name [default: fast]")
    parser.add_argument("--split", default="val", help="the judged split of every domain [default: val]")
    parser.add_argument("--queries", type=int, default=1000, help="judged queries per domain, seeded sample")
    parser.add_argument("--docs", type=int, default=25_000, help="corpus documents per domain at most (the judged ones kept)")
    parser.add_argument("--alpha-step", type=float, default=0.05, help="the grid's alphas: 0, step, ..., 1 [default: 0.05]")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--work", type=Path, default=None, help="folder for the indexes [default: a temporary one, removed]")
    parser.add_argument("--out", type=Path, default=None, help="write every domain's grid and the choice here as JSON")
    parser.add_argument("--write", action="store_true", help="store the choice as the model's fusion_defaults")
    parser.add_argument("--again", type=Path, default=None, metavar="JSON",
                        help="choose again from the domains' grids of an earlier --out (nothing is indexed)")
    args = parser.parse_args()
    names = [name for name, *_ in args.domains]
    if len(set(names)) != len(names):
        parser.error(f"--domain names must differ: {', '.join(names)}")
    if not 0 < args.alpha_step <= 1:
        parser.error("--alpha-step must be in (0, 1]")
    alphas = sorted({round(min(1.0, i * args.alpha_step), 4) for i in range(int(round(1 / args.alpha_step)) + 1)} | {1.0})
    if bool(args.again) == bool(args.domains):
        parser.error("give --domain (one or more), or --again JSON")
    encoder = Encoder.load(resolve_model(args.model))
    if args.again:
        domains = json.loads(args.again.read_text(encoding="utf-8"))["domains"]
    else:
        domains = measure(args, encoder, alphas)
    best, points = choose(domains)
    print(table(domains, best, points))
    depth = max(d["depth"] for d in domains.values())
    holds = best["smallest"] >= -1e-12
    # no depth: each task keeps its own list depth
    defaults = {"fusion": best["fusion"], "alpha": best["alpha"], "chosen_on": {
        # the domains by name (their folders are in the --out record, not in a model's config)
        "domains": {name: {"split": d["split"], "metric": d["metric"], "margin": round(best["margins"][name], 4)}
                    for name, d in domains.items()},
        "rule": "of the points at least each domain's better single mode, the largest mean margin" if holds else
                "no point is at least each domain's better single mode: the largest smallest margin",
        "holds_on_every_domain": holds}}
    if args.out:
        write_json(args.out, {"command": command_line(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                              "model": repo_relative(encoder.model_dir), "cpus": os.cpu_count(),
                              "load_average": [round(x, 2) for x in os.getloadavg()], "list_depth": depth,
                              "chosen": best, "defaults": defaults, "domains": domains, "points": points})
    if args.write:
        update_encoder_config(encoder.model_dir, **{ENCODER_FUSION_DEFAULTS: defaults})
        print(f"stored in {repo_relative(Path(encoder.model_dir) / 'config.json')}: {best['fusion']} alpha {best['alpha']}")


if __name__ == "__main__":
    main()
