"""``hybrid-qpr distill``: teach the CNN a teacher encoder's geometry (e.g. MiniLM) on unlabelled questions."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import BATCH, SEED, cnn_size_options, FiniteFloatRange, friendly_errors


@click.command()
@click.argument("corpus", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--teacher", "teacher_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="ONNX encoder directory of the teacher (e.g. 'hybrid-qpr export --out models/minilm --int8').")
@click.option("--out", "run_dir", required=True, type=click.Path(file_okay=False), help="Run directory (checkpoints, best.pt).")
@click.option("--pairs", type=click.Path(exists=True, file_okay=False), default=None,
              help="Dataset directory ('hybrid-qpr dataset build'): its train pairs add the SDML loss, its val split validates.")
@click.option("--pairs-weight", type=FiniteFloatRange(min=0), default=1.0, show_default=True, help="Weight of the SDML term on --pairs.")
@click.option("--init", type=click.Path(exists=True, file_okay=False), default=None,
              help="Start from this train/distill run's best model, or an exported CNN model directory (e.g. the "
                   "bundled onnx/distilled-cnn-quora), and its vocabulary (domain adaptation).")
@click.option("--max-per-source", type=click.IntRange(min=1), default=None,
              help="Keep a seeded random sample of at most this many distinct texts of each CORPUS source.")
@click.option("--teacher-temperature", type=FiniteFloatRange(min=0, min_open=True), default=0.05, show_default=True,
              help="Teacher cosine / T before the softmax: lower = sharper targets.")
@click.option("--group-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Batches are built from groups of this many teacher nearest neighbours (1 = random batches).")
@click.option("--teacher-cache", type=click.Path(file_okay=False), default=None,
              help="Directory of the cached teacher vectors (keyed by corpus + teacher). [default: RUN/teacher]")
@click.option("--teacher-words/--no-teacher-words", default=True, show_default=True,
              help="Add the teacher's whole words to the vocabulary and start every word embedding from the teacher's "
                   "vector of that word alone (PCA to --embedding-dim) instead of at random; ignored with --init. "
                   "On Quora it lifted validation MRR@20 after one epoch from 0.808 to 0.943 (docs/training.md).")
@click.option("--held-out", type=click.IntRange(min=0), default=2000, show_default=True,
              help="Questions held out for teacher-agreement validation when there is no labelled val split.")
@cnn_size_options(vocab=30_000, hash_bins=5000, embedding_dim=128, channels=256, dim=256, layers=1,
                  note="ignored with --init")
@click.option("--student", type=click.Choice(["cnn", "static"]), default="cnn", show_default=True,
              help="cnn: the SDML CNN with its own vocabulary; static: the teacher's WordPiece tokenizer and a token "
                   "table started from the teacher (the bundled fast model; docs/models.md; --dim and --group-size "
                   "apply, --pairs/--init/--max-per-source do not). Export with --kind static.")
@click.option("--window", type=click.IntRange(min=0), default=0, show_default=True,
              help="--student static: width of the contextual convolution over the tokens (0 = none).")
@click.option("--batch-size", type=BATCH, default=512, show_default=True)
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--patience", type=click.IntRange(min=1), default=3, show_default=True, help="Epochs without val MRR gain before stopping.")
@click.option("--max-minutes", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Stop after this much training time.")
@click.option("--seed", type=SEED, default=13, show_default=True)
@click.option("--resume", is_flag=True, help="Continue from RUN/checkpoint.pt.")
@friendly_errors
def distill(corpus, teacher_dir, run_dir, pairs, pairs_weight, init, max_per_source, teacher_temperature, group_size, teacher_cache,
            teacher_words, held_out, vocab, hash_bins, embedding_dim, channels, dim, layers, student, window, batch_size, lr,
            epochs, patience, max_minutes, seed, resume) -> None:
    """Distil TEACHER into a CNN (or, --student static, a token table like the bundled fast
    model) on the questions of CORPUS...; best model in RUN/best.pt.

    CORPUS needs no labels: one or more JSONL/TSV/CSV question files (as for 'ingest'), BEIR
    directories, dataset directories (their train questions) or answer sets ('dataset
    from-answers'/'from-squad': their train questions and candidate sentences), mixed in the
    order given. The teacher embeds the mix once (cached, resumable); the student learns the
    teacher's in-batch similarity distribution.

    \b
    Examples:
      hybrid-qpr export --out models/minilm-int8 --int8
      hybrid-qpr distill data/quora --teacher models/minilm-int8 --out runs/distill --pairs data/quora
      hybrid-qpr distill my-questions.jsonl --teacher models/minilm-int8 --out runs/mine --init runs/distill
      hybrid-qpr distill data/quora data/wikianswers data/wikiqa --teacher models/minilm-int8 --out runs/wide \\
          --pairs data/quora --init onnx/distilled-cnn-quora --max-per-source 100000
      hybrid-qpr export runs/distill --kind cnn --out models/distilled-cnn
      hybrid-qpr distill data/quora data/wikiqa --teacher onnx/minilm-l6-int8 --out runs/fast --student static
      hybrid-qpr export runs/fast --kind static --out models/fast
    """
    from hybrid_qpr.training.cnn import TrainConfig
    from hybrid_qpr.training.distill import DistillConfig, distill as run_distillation

    if student == "static":
        from pathlib import Path

        from hybrid_qpr.training.static import distill_static

        if pairs or init or max_per_source:
            raise click.UsageError("--student static takes no --pairs, --init or --max-per-source")
        result = distill_static(corpus, teacher_dir, run_dir, tokenizer_path=Path(teacher_dir) / "tokenizer.json",
                                dim=dim, window=window, group_size=group_size, held_out=held_out,
                                teacher_cache=teacher_cache, resume=resume,
                                train_config=TrainConfig(batch_size=batch_size, lr=lr, epochs=epochs, patience=patience,
                                                         seed=seed, max_minutes=max_minutes))
        click.echo(json.dumps({"best_epoch": result.best_epoch, "best_val_mrr@20": result.best_val_mrr}))
        return

    config = DistillConfig(teacher_temperature=teacher_temperature, group_size=group_size, pairs_weight=pairs_weight,
                           held_out=held_out, vocab=vocab, hash_bins=hash_bins, teacher_words=teacher_words,
                           architecture=dict(embedding_dim=embedding_dim, channels=channels, dim=dim, layers=layers))
    train_config = TrainConfig(batch_size=batch_size, lr=lr, epochs=epochs, patience=patience, seed=seed,
                               max_minutes=max_minutes)
    result = run_distillation(corpus, teacher_dir, run_dir, pairs=pairs, init=init, config=config,
                              train_config=train_config, teacher_cache=teacher_cache, resume=resume, max_per_source=max_per_source,
                              on_epoch=lambda entry: click.echo(json.dumps(entry)))
    click.echo(json.dumps({"best_epoch": result.best_epoch, "best_val_mrr@20": result.best_val_mrr}))
