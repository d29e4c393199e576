"""Entry point of the ``hybrid-qpr`` command. Commands load lazily so ``--help`` is fast
and ``query`` never pays for torch."""

from __future__ import annotations

import importlib
import logging

import click

# command name -> (module, attribute, one-line help shown by ``hybrid-qpr --help``)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "dataset": ("hybrid_qpr.cli.dataset", "dataset", "Turn question pairs or QA logs into paraphrase clusters, splits and BEIR eval sets."),
    "train": ("hybrid_qpr.cli.train", "train", "Train a paraphrase encoder (SDML, softmax, triplet, MSEM) [needs torch]."),
    "distill": ("hybrid_qpr.cli.distill", "distill", "Distil a teacher encoder (MiniLM) into a CNN or a token table (the fast model's kind) on unlabelled questions [needs torch]."),
    "finetune": ("hybrid_qpr.cli.finetune", "finetune", "Fine-tune a pretrained transformer (MiniLM) on question pairs [needs torch]."),
    "interpolate": ("hybrid_qpr.cli.interpolate", "interpolate",
                    "Mix a fine-tuned transformer's weights with its base model's (WiSE-FT) [needs torch]."),
    "asbert": ("hybrid_qpr.cli.asbert", "asbert", "Fine-tune MiniLM for answer selection (ASBERT: triplet, siamese, SDML) [needs torch]."),
    "crossvae": ("hybrid_qpr.cli.crossvae", "crossvae", "Train Cross-VAE for answer retrieval; export question/answer encoders [needs torch]."),
    "reranker": ("hybrid_qpr.cli.reranker", "reranker", "Train or export a cross-encoder reranker (re-scores the top hits; --reranker DIR) [needs torch]."),
    "export": ("hybrid_qpr.cli.export", "export", "Export a trained encoder to ONNX (model.onnx, tokenizer.json, config.json)."),
    "ingest": ("hybrid_qpr.cli.ingest", "ingest", "Index questions into a local index directory or an OpenSearch/Elasticsearch index."),
    "query": ("hybrid_qpr.cli.query", "query", "Search: bm25, knn, hybrid (fused) or rescore; one query or a batch file."),
    "delete": ("hybrid_qpr.cli.delete", "delete", "Delete documents by id from an index."),
    "index": ("hybrid_qpr.cli.index", "index", "Check, repair or optimize (merge) a local index directory; drop a cluster index."),
    "tune": ("hybrid_qpr.cli.tune", "tune", "Choose fusion method and weight on validation data; store them as index defaults."),
    "evaluate": ("hybrid_qpr.cli.evaluate", "evaluate", "Evaluate search modes on a BEIR eval set; write report.md/json and a plot."),
    "compare": ("hybrid_qpr.cli.compare", "compare",
                "Compare two search configurations on a query log without judgments (Jaccard, rank-biased overlap)."),
    "history": ("hybrid_qpr.cli.history", "history", "Show the trend of the evaluations kept by 'evaluate --history' and flag significant drops."),
    "judgments": ("hybrid_qpr.cli.judgments", "judgments", "Convert judgments between TREC qrels, Quepid CSV and the BEIR layout."),
    "node": ("hybrid_qpr.cli.node", "node", "Start, stop or check a local OpenSearch or Elasticsearch node built from Maven Central."),
    "search-pipeline": ("hybrid_qpr.cli.search_pipeline", "search_pipeline",
                        "Install the OpenSearch search pipelines used by server-side hybrid queries."),
    "mlcommons": ("hybrid_qpr.cli.mlcommons", "mlcommons", "Register and deploy a transformer encoder in OpenSearch ml-commons (in-cluster embedding)."),
    "serve": ("hybrid_qpr.cli.serve", "serve",
              "Serve the relevance workbench: every mode side by side in the browser, judge hits, tune [needs serve]."),
    "demo": ("hybrid_qpr.cli.demo", "demo", "Build an index from the bundled sample question bank and compare the modes."),
}


# Old names that still work but are not listed: "pipeline" did not say which pipeline;
# "cluster" (the node commands) read as the paraphrase clusters or a remote search cluster.
ALIASES: dict[str, str] = {"pipeline": "search-pipeline", "cluster": "node"}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(name for name, (module, _, _) in COMMANDS.items() if importlib.util.find_spec(module))

    def get_command(self, ctx, name):
        name = ALIASES.get(name, name)
        if name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[name]
        try:
            return getattr(importlib.import_module(module), attribute)
        except KeyboardInterrupt:
            # loading a command (numpy, FAISS, the backends) takes a moment and changes nothing: said so,
            # with the shell's code for an interrupt instead of click's "Aborted!" and 1
            click.echo(f"interrupted while '{ctx.command_path} {name}' was starting; nothing was done", err=True)
            raise SystemExit(130) from None

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(package_name="hybrid-qpr")
def cli(verbose: int) -> None:
    """hybrid-qpr: find the known paraphrases of a new question.

    BM25 for word overlap, a trained encoder plus kNN for paraphrases with little
    overlap, and a fusion of both. Runs embedded (SQLite + FAISS + BM25 postings in a
    local directory), in OpenSearch (--opensearch) or in Elasticsearch (--elasticsearch).

    \b
    Quick start (the bundled model and sample bank; questions.jsonl: one {"id", "text"} per line):
      hybrid-qpr demo
      hybrid-qpr ingest questions.jsonl --index ./qidx
      hybrid-qpr query "how do i reset my password" --index ./qidx --mode hybrid
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":  # pragma: no cover
    cli()
