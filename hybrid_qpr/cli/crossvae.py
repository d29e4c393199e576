"""``hybrid-qpr crossvae``: train Cross-VAE on answer datasets and export an asymmetric model."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import BATCH, SEED, FiniteFloatRange, friendly_errors


@click.command()
@click.argument("datasets", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Run directory: feature cache, checkpoint, log.jsonl, report.json. Rerunning resumes from its checkpoint.")
@click.option("--val-beir", type=click.Path(exists=True, file_okay=False), default=None,
              help="BEIR directory whose val split picks the best epoch by answer-retrieval MRR (e.g. data/squad/beir).")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Write the asymmetric ONNX model directory (question and answer sides) here.")
@click.option("--int8", "quantize", is_flag=True, help="Quantize both exported sides to int8 (dynamic).")
@click.option("--latent", type=click.IntRange(min=1), default=384, show_default=True, help="Latent dimension (the vector size; 384 = the MiniLM width).")
@click.option("--vocab", type=click.IntRange(min=1), default=8000, show_default=True, help="Decoder vocabulary (most frequent training words).")
@click.option("--decoder-hidden", type=click.IntRange(min=1), default=256, show_default=True, help="GRU size of each decoder.")
@click.option("--decoder-max-tokens", type=click.IntRange(min=1), default=40, show_default=True, help="Tokens each decoder rebuilds per text.")
@click.option("--epochs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--batch-size", type=BATCH, default=64, show_default=True, help="Pairs per batch (the others are the matching negatives).")
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=1e-5, show_default=True)
@click.option("--beta", type=FiniteFloatRange(min=0), default=1.0, show_default=True, help="KL weight (reached after --kl-warmup steps).")
@click.option("--kl-warmup", type=click.IntRange(min=0), default=300, show_default=True, help="Steps of linear KL annealing from 0.")
@click.option("--lam", type=FiniteFloatRange(min=0), default=1.0, show_default=True, help="Weight of the question-answer matching loss.")
@click.option("--match-on", type=click.Choice(["samples", "means"]), default="means", show_default=True,
              help="Score the matching loss at the latent means or on sampled latents (the paper; stays near chance).")
@click.option("--match-loss", type=click.Choice(["softmax", "bce"]), default="softmax", show_default=True,
              help="Matching loss: softmax over the candidates (ranking) or the paper's binary predictor.")
@click.option("--hard-negatives", type=click.IntRange(min=0), default=1, show_default=True,
              help="Labelled wrong sentences of each question added to the matching candidates per step.")
@click.option("--train-encoder", is_flag=True, help="Fine-tune the pretrained encoder too (slower: no feature cache).")
@click.option("--max-pairs", type=click.IntRange(min=1), default=None, help="Train on a seeded sample of this many pairs (a time budget).")
@click.option("--patience", type=click.IntRange(min=1), default=4, show_default=True, help="Stop after this many epochs without a better val MRR.")
@click.option("--max-minutes", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Stop after the epoch that passes this time budget.")
@click.option("--max-length", type=click.IntRange(min=1), default=128, show_default=True, help="Backbone tokens per text.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@friendly_errors
def crossvae(datasets, out_dir, val_beir, export_dir, quantize, latent, vocab, decoder_hidden, decoder_max_tokens, epochs, batch_size, lr, beta, kl_warmup, lam,
             match_on, match_loss, hard_negatives, train_encoder, max_pairs, patience, max_minutes, max_length, seed) -> None:
    """Train Cross-VAE (Yu et al. 2020) on the train questions of DATASETS (directories written
    by 'dataset from-squad' or 'from-answers') [needs torch and transformers].

    Question and answer VAEs whose decoders rebuild the other side, plus a matching loss that
    aligns their latents; answers are retrieved by the cosine of latent means. The encoder is
    MiniLM (frozen unless --train-encoder) + a trainable head per side (see hybrid_qpr/model/crossvae.py for the loss
    terms, their weights and what is uncertain).

    \b
    Example:
      hybrid-qpr crossvae data/squad data/wikiqa --val-beir data/squad/beir --out runs/crossvae --export models/crossvae
      hybrid-qpr crossvae data/squad data/wikiqa data/trecqa --val-beir data/squad/beir --out runs/cvae-enc --train-encoder --batch-size 16 --lr 2e-5 --max-length 64 --epochs 1 --export models/cvae-enc --int8
      hybrid-qpr ingest data/squad/beir/corpus.jsonl --index ./squad-cvae --model models/crossvae
    """
    from hybrid_qpr.training.crossvae import CrossVAESettings, train_crossvae

    settings = CrossVAESettings(latent=latent, vocab=vocab, decoder_hidden=decoder_hidden,
                                decoder_max_tokens=decoder_max_tokens, epochs=epochs, batch_size=batch_size, lr=lr, beta=beta, kl_warmup=kl_warmup,
                                lam=lam, match_on_means=match_on == "means", match_loss=match_loss,
                                hard_negatives=hard_negatives, train_encoder=train_encoder, max_pairs=max_pairs, patience=patience, max_minutes=max_minutes, max_length=max_length, seed=seed)
    report = train_crossvae(datasets, out_dir, settings, val_beir=val_beir, export_dir=export_dir, quantize=quantize)
    click.echo(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=2))
