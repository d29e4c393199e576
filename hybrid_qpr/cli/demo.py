"""``hybrid-qpr demo``: the main job on a fresh clone - index the sample bank, compare the modes."""

from __future__ import annotations

from pathlib import Path

import click

from hybrid_qpr.cli._common import friendly_errors

DEMO_QUERIES = (
    "i can't remember my netflix login, help",
    "cheapest way to fly to lisbon?",
    "what to use when a recipe needs eggs but i have none",
    "my macbook is really sluggish",
    "is putting money in bitcoin smart?",
)


@click.command()
@click.option("--index", type=click.Path(file_okay=False), default=None,
              help="Where to build the index. [default: a temporary directory, removed afterwards]")
@click.option("--model", type=click.Path(file_okay=False), default=None, help="Encoder directory. [default: the model committed in onnx/]")
@click.option("--examples", "examples_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Directory with questions.jsonl and beir/. [default: the demo bank shipped with the package]")
@click.option("-k", "--top-k", type=int, default=3, show_default=True, help="Hits shown per mode.")
@friendly_errors
def demo(index, model, examples_dir, top_k) -> None:
    """Build an embedded index from the sample question bank (examples/questions.jsonl) with
    the committed encoder, tune the fusion on the bank's validation groups, answer a few
    queries in bm25, knn and hybrid mode side by side, and print an evaluation table on the
    bank's test groups (examples/beir).

    \b
    Example:
      hybrid-qpr demo
    """
    import tempfile

    from rich.console import Console
    from rich.table import Table

    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import evaluate, sample_queries, tune
    from hybrid_qpr.evaluation.report import markdown_table
    from hybrid_qpr.search import HybridSearcher

    from hybrid_qpr.cli._engine import quiet_bm25s

    quiet_bm25s()
    console = Console()
    from hybrid_qpr import resources

    examples_dir = Path(examples_dir) if examples_dir else resources.examples_dir()
    encoder = Encoder.load(model)
    with tempfile.TemporaryDirectory(prefix="hybrid-qpr-demo-") as tmp:
        target = Path(index) if index else Path(tmp) / "index"
        backend = LocalIndex.create(target, encoder)
        report = backend.ingest(iter_documents(examples_dir / "questions.jsonl"), encoder, show_progress=False)
        console.print(f"indexed {report.indexed} questions (updated {report.updated}) into {target} with model "
                      f"{encoder.model_dir.name} ({encoder.fingerprint}) in {report.seconds:.1f} s\n")
        searcher = HybridSearcher(backend, encoder)
        _, val_queries, val_qrels = load_beir(examples_dir / "beir", "val")
        tuned = tune(searcher, sample_queries(val_queries, val_qrels, None), val_qrels)
        backend.set_fusion_defaults(tuned.defaults)
        console.print(f"tuned on the bank's val groups: fusion={tuned.fusion} alpha={tuned.alpha:.1f} "
                      f"(MRR@20 {tuned.mrr:.3f}; bm25 {tuned.bm25_mrr:.3f}, knn {tuned.knn_mrr:.3f})\n")
        modes = ("bm25", "knn", "hybrid")
        for text in DEMO_QUERIES:
            table = Table(title=f"query: {text}", title_justify="left", show_lines=False)
            for mode in modes:
                table.add_column(mode, overflow="fold", ratio=1)
            answers = {m: searcher.search(text, mode=m, top_k=top_k) for m in modes}
            for i in range(top_k):
                table.add_row(*[f"{answers[m][i].text} [{answers[m][i].score:.3f}]" if i < len(answers[m]) else "-"
                                for m in modes])
            console.print(table)
        _, queries, qrels = load_beir(examples_dir / "beir", "test")
        results = evaluate(searcher, sample_queries(queries, qrels, None), qrels, modes=("bm25", "knn", "hybrid", "rerank"))
        console.print(f"\nEvaluation on the bank's test groups ({len(queries)} queries, retrieve 20, own id dropped):")
        click.echo(markdown_table(results))
