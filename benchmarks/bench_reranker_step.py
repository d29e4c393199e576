"""What a reranker training step costs, and what each lever saves: train pairs per second.

Each variant (``NAME=setting,setting``: ``precision=fp32|bf16``, ``buckets=N``, ``max_length=N``,
``optimizer=fused|plain``) builds the cross-encoder as ``hybrid-qpr reranker train`` does, then
times ``--steps`` steps of the trainer's own step function (``training.reranker.step_function``:
draw a batch, forward, backward) plus the AdamW update (``fused``: the trainer's own
``training.trainer.adamw``; ``plain``: torch's default AdamW), after ``--warmup`` untimed steps. Every variant sees the same
batches (same seed, same step numbers). It also prints the untruncated pair-length
distribution of the train data, to choose ``--max-length`` from.

Run it with the machine to itself: other work on a two-core box halves the figures.

Example (numbers in docs/training.md, "Step cost")::

    python benchmarks/bench_reranker_step.py data/wikiqa data/trecqa data/squad \\
        --variant fp32=precision=fp32,optimizer=plain --variant bf16=precision=bf16,optimizer=plain \\
        --variant bf16-buckets-fused=precision=bf16,buckets=3 --out benchmarks/results/reranker_step.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from _common import command_line
from hybrid_qpr.artifacts import write_json

SETTING_NAMES = {"precision": "precision", "buckets": "length_buckets", "max_length": "max_length",
                 "optimizer": "optimizer"}


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, spec = text.partition("=")
    options = {}
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        if key not in SETTING_NAMES:
            raise SystemExit(f"--variant {text}: unknown setting {key!r} (known: {', '.join(SETTING_NAMES)})")
        options[SETTING_NAMES[key]] = value if key in ("precision", "optimizer") else int(value)
    return name, options


def time_variant(examples, base, options: dict, args) -> dict:
    import torch

    from hybrid_qpr.training.reranker import build_model, step_function
    from hybrid_qpr.training.trainer import adamw

    options = dict(options)
    fused = options.pop("optimizer", "fused") == "fused"
    settings = dataclasses.replace(base, **options)
    settings.check()
    torch.manual_seed(args.seed)
    model = build_model(settings).train()
    optimizer = adamw(model.parameters(), 2e-5, 0.01) if fused else torch.optim.AdamW(model.parameters(), lr=2e-5)
    step = step_function(model, examples, settings, args.seed)
    pairs = settings.batch_size * (1 + settings.negatives)
    seconds = []
    for n in range(args.warmup + args.steps):
        start = time.perf_counter()
        step(n)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if n >= args.warmup:
            seconds.append(time.perf_counter() - start)
    total = sum(seconds)
    return {"settings": {"precision": settings.precision, "length_buckets": settings.length_buckets,
                         "max_length": settings.max_length, "optimizer": "fused" if fused else "plain"},
            "steps": len(seconds), "pairs_per_step": pairs, "seconds_per_step": round(total / len(seconds), 3),
            "pairs_per_second": round(pairs * len(seconds) / total, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", help="answer or paraphrase dataset directories, as for 'reranker train'")
    parser.add_argument("--variant", action="append", required=True, help="NAME=setting=value,... (module docstring)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--negatives", type=int, default=7)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's choice]")
    parser.add_argument("--out", default=None, help="JSON result file")
    args = parser.parse_args()
    import torch

    from hybrid_qpr.training.reranker import RerankerSettings, build_model, load_examples, pair_lengths

    if args.threads:
        torch.set_num_threads(args.threads)
    base = RerankerSettings(batch_size=args.batch_size, negatives=args.negatives, max_length=args.max_length)
    examples = load_examples(args.datasets, base, args.seed)
    lengths = np.array(pair_lengths(build_model(base), examples, seed=args.seed))
    quantiles = {f"p{q}": int(np.percentile(lengths, q)) for q in (50, 90, 95, 99)}
    print(f"pair lengths (tokens, untruncated, {len(lengths)} pairs): {quantiles}, max {int(lengths.max())}")
    result = {"command": command_line(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "pair_lengths": {**quantiles, "max": int(lengths.max()), "pairs": len(lengths)}, "variants": {}}
    for text in args.variant:
        name, options = parse_variant(text)
        measured = time_variant(examples, base, options, args)
        result["variants"][name] = measured
        print(f"{name:24s} {measured['pairs_per_second']:8.2f} pairs/s  {measured['seconds_per_step']:.3f} s/step "
              f"({measured['settings']})", flush=True)
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
